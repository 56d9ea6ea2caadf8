/**
 * What the ledger says about the demo workspace (plain reads, no locks): the
 * operations by state, the `task.created` and `task.dependencies_resolved`
 * events and their delivery, launch
 * dispatch claims and running executors, worktrees on disk. `waitForSettled`
 * polls it until nothing is left to happen, or a bound passes.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { readRows, type Db } from '../db/tx';
import { AGENT_MARKER_FILE } from './setup';

export interface OperationRow {
  id: string;
  task_id: string;
  state: string;
  start_policy: string;
  abort_cause: string | null;
  result_outcome: string | null;
  /** A step that failed permanently, as `kind: error_code`; null when none. */
  failed_step: string | null;
}

export interface StepRow {
  operation_id: string;
  kind: string;
  state: string;
  attempt: number;
  error_code: string | null;
}

export interface LedgerSnapshot {
  operations: OperationRow[];
  events: { total: number; delivered: number; duplicateTasks: number };
  /** `task.dependencies_resolved` events, and how many of them are for a deferred start. */
  resolved: { total: number; delivered: number; deferred: number };
  /** Completed creations with an immediate start, and resolved deferred starts: each should launch one agent. */
  launchesExpected: number;
  claims: Record<string, number>;
  executors: Record<string, number>;
  worktrees: { total: number; onDisk: number; dir: string };
  /** Launched agents whose marker file exists in their working directory. */
  agentMarkers: number;
}

const num = (v: unknown): number => Number(v ?? 0);

function countBy(rows: { state: string; n: unknown }[]): Record<string, number> {
  return Object.fromEntries(rows.map((r) => [r.state, num(r.n)]));
}

export async function readSnapshot(db: Db, workspaceId: string, dataDir: string): Promise<LedgerSnapshot> {
  const ops = await readRows<Omit<OperationRow, 'failed_step'>>(
    db,
    `SELECT id, task_id, state, start_policy, abort_cause, result_outcome
       FROM task_creation_operations WHERE workspace_id = ? ORDER BY created_at, id`,
    [workspaceId],
  );
  const failed = await readRows<{ operation_id: string; kind: string; error_code: string | null }>(
    db,
    `SELECT s.operation_id, s.kind, s.error_code FROM task_creation_steps s
       JOIN task_creation_operations o ON o.id = s.operation_id
      WHERE o.workspace_id = ? AND s.state = 'failed' ORDER BY s.kind`,
    [workspaceId],
  );
  const failedBy = new Map(failed.map((f) => [f.operation_id, `${f.kind}: ${f.error_code ?? 'failed'}`]));
  const operations = ops.map((o) => ({ ...o, failed_step: failedBy.get(o.id) ?? null }));

  const [ev] = await readRows<{ total: unknown; delivered: unknown }>(
    db,
    `SELECT COUNT(*) AS total, COUNT(delivered_at) AS delivered FROM event_outbox
      WHERE workspace_id = ? AND type = 'task.created'`,
    [workspaceId],
  );
  const [res] = await readRows<{ total: unknown; delivered: unknown; deferred: unknown }>(
    db,
    `SELECT COUNT(*) AS total, COUNT(e.delivered_at) AS delivered,
            SUM(CASE WHEN o.start_policy = 'deferred' AND o.state = 'completed' THEN 1 ELSE 0 END) AS deferred
       FROM event_outbox e JOIN task_creation_operations o ON o.id = e.operation_id
      WHERE e.workspace_id = ? AND e.type = 'task.dependencies_resolved'`,
    [workspaceId],
  );
  const dups = await readRows<{ task_id: string }>(
    db,
    `SELECT task_id FROM event_outbox WHERE workspace_id = ? AND type = 'task.created' GROUP BY task_id HAVING COUNT(*) > 1`,
    [workspaceId],
  );
  const claims = await readRows<{ state: string; n: unknown }>(
    db,
    'SELECT state, COUNT(*) AS n FROM task_launch_dispatch_claims WHERE workspace_id = ? GROUP BY state',
    [workspaceId],
  );
  const executors = await readRows<{ state: string; n: unknown }>(
    db,
    'SELECT state, COUNT(*) AS n FROM executors_running WHERE workspace_id = ? GROUP BY state',
    [workspaceId],
  );
  const trees = await readRows<{ worktree_path: string }>(
    db,
    'SELECT worktree_path FROM task_environment_repos WHERE workspace_id = ? AND worktree_path IS NOT NULL',
    [workspaceId],
  );
  const launched = await readRows<{ task_id: string }>(
    db,
    "SELECT task_id FROM task_launch_dispatch_claims WHERE workspace_id = ? AND state = 'succeeded'",
    [workspaceId],
  );
  const treeOf = new Map<string, string>();
  for (const t of trees) {
    // worktrees/<workspace>/<task>/<repo>
    const parts = t.worktree_path.split(/[\\/]/);
    const task = parts.at(-2);
    if (task && !treeOf.has(task)) treeOf.set(task, t.worktree_path);
  }
  const agentMarkers = launched.filter((l) =>
    existsSync(join(treeOf.get(l.task_id) ?? join(dataDir, 'tasks', l.task_id), AGENT_MARKER_FILE)),
  ).length;

  return {
    operations,
    events: { total: num(ev?.total), delivered: num(ev?.delivered), duplicateTasks: dups.length },
    resolved: { total: num(res?.total), delivered: num(res?.delivered), deferred: num(res?.deferred) },
    launchesExpected:
      operations.filter((o) => o.state === 'completed' && o.start_policy === 'immediate').length + num(res?.deferred),
    claims: countBy(claims),
    executors: countBy(executors),
    worktrees: {
      total: trees.length,
      onDisk: trees.filter((t) => existsSync(t.worktree_path)).length,
      dir: join(dataDir, 'worktrees', workspaceId),
    },
    agentMarkers,
  };
}

export async function readSteps(db: Db, operationIds: string[], kind: string): Promise<StepRow[]> {
  if (operationIds.length === 0) return [];
  const rows = await readRows<StepRow>(
    db,
    `SELECT operation_id, kind, state, attempt, error_code FROM task_creation_steps
      WHERE kind = ? AND operation_id IN (${operationIds.map(() => '?').join(', ')})`,
    [kind, ...operationIds],
  );
  return rows.map((r) => ({ ...r, attempt: num(r.attempt) }));
}

const TERMINAL = new Set(['completed', 'aborted']);

/** What is still to happen: operations moving, operations stopped on a failed step, undelivered events, agents not launched. */
function outstanding(s: LedgerSnapshot): { active: number; stuck: number; rest: number } {
  const open = s.operations.filter((o) => !TERMINAL.has(o.state));
  const launched = (s.claims.succeeded ?? 0) + (s.claims.cancelled ?? 0);
  return {
    active: open.filter((o) => o.failed_step === null).length,
    stuck: open.filter((o) => o.failed_step !== null).length,
    rest:
      s.events.total -
      s.events.delivered +
      s.resolved.total -
      s.resolved.delivered +
      Math.max(0, s.launchesExpected - launched) +
      Math.max(0, (s.claims.succeeded ?? 0) - s.agentMarkers),
  };
}

/** Why 2 s: an operation stopped on a failed step either moves on (compensation, abort) within a sweep of its
 *  wake-up or not at all in this build; two seconds without any change in the workspace says which. */
const STALL_MS = 2_000;

/**
 * Polls until every operation completed or aborted, every `task.created` is
 * delivered and every immediate start has launched its agent (and the agent
 * wrote its file) — or until only operations stopped on a failed step are
 * left and nothing changed for STALL_MS — or `timeoutMs` passed.
 */
export async function waitForSettled(
  db: Db,
  workspaceId: string,
  dataDir: string,
  timeoutMs: number,
): Promise<{ snapshot: LedgerSnapshot; timedOut: boolean; waitedMs: number }> {
  const started = Date.now();
  let last = '';
  let lastChange = started;
  for (;;) {
    const snapshot = await readSnapshot(db, workspaceId, dataDir);
    const waitedMs = Date.now() - started;
    const left = outstanding(snapshot);
    if (left.active + left.stuck + left.rest === 0) return { snapshot, timedOut: false, waitedMs };
    const signature = JSON.stringify([snapshot.operations.map((o) => o.state), snapshot.events, snapshot.claims]);
    if (signature !== last) {
      last = signature;
      lastChange = Date.now();
    }
    if (left.active + left.rest === 0 && Date.now() - lastChange >= STALL_MS) {
      return { snapshot, timedOut: false, waitedMs };
    }
    if (waitedMs >= timeoutMs) return { snapshot, timedOut: true, waitedMs };
    await new Promise((r) => setTimeout(r, 200));
  }
}
