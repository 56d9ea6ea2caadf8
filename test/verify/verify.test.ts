/**
 * `taskledger verify`: a completed and launched creation and an unfinished
 * one (its workspace attachment, attachment claim, worktree, session and
 * launch intent re-observed) verify clean, with every row counted; then each kind of tampering or
 * lost effect is reported under its own code, and nothing else is; the
 * command's exit codes and report. Both dialects.
 */
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { canonicalJson } from '../../src/canonical/canonical-json';
import { verifyCommand } from '../../src/cli/verify';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { completeTaskCreation } from '../../src/store/complete';
import type { BeginResult, OperationAuthority } from '../../src/store/types';
import type { VerifyReport } from '../../src/verify/drift';
import { verifyLedger, type VerifyProgress } from '../../src/verify/run';
import { captureConsole } from '../support/console';
import { sql, useTestDb } from '../support/db';
import { begin, driveAllSteps, stepRows } from '../support/ledger';
import { launchNow } from '../support/launch';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';
import { effectDeps, stageAttachmentFiles } from '../steps/support';

const t = useTestDb();

interface World {
  ws: SeededWorkspace;
  /** Completed, its agent launched. */
  done: BeginResult;
  /** Every step done, not yet completed: its effects are re-observed. */
  open: BeginResult;
}

async function world(): Promise<World> {
  const ws = await seedWorkspace(t.db);
  await sql(t.db, 'UPDATE agent_profiles SET executor_json = ? WHERE id = ?', [
    canonicalJson({ kind: 'local', command: ['true'] }),
    ws.agentProfileId,
  ]);
  const body = {
    start_agent: true,
    agent_profile_id: ws.agentProfileId,
    repositories: [{ repository_id: ws.repositoryId, fresh_branch: true }],
    workspace_policy: { mode: 'shared_group', group_id: ws.groupId },
  };
  const done = await begin(t.db, ws, { ...body, title: 'done' });
  const doneAuth: OperationAuthority = { kind: 'handle', handle: done.handle! };
  await driveAllSteps(t.db, doneAuth, done.operationId, ws.dataDir);
  expect((await completeTaskCreation(t.db, doneAuth)).outcome).toBe('Created');
  const sessionId = (await stepRows(t.db, done.operationId)).find((r) => r.kind === 'launch_intent')!.step_key;
  const launched = await launchNow(
    t.db,
    ws.dataDir,
    { operationId: done.operationId, taskId: done.task.id, sessionId },
    'verify-test',
  );
  expect(launched).toBe('launched');

  // The unfinished one also claims the staged attachments: every local kind's observe runs.
  await stageAttachmentFiles(t.db, ws);
  const open = await begin(t.db, ws, { ...body, title: 'open', attachments: ws.attachmentIds });
  await driveAllSteps(t.db, { kind: 'handle', handle: open.handle! }, open.operationId, ws.dataDir);
  return { ws, done, open };
}

function verify(ws: SeededWorkspace, observe = true, progress?: VerifyProgress): Promise<VerifyReport> {
  return verifyLedger(
    { db: t.db, effects: effectDeps(t.db, ws.dataDir, 5000), handlers: defaultStepHandlers },
    // One operation per page: the paging is exercised too.
    { workspaceId: ws.workspaceId, observe, maxDrift: 100, pageSize: 1 },
    progress,
  );
}

const codesOf = (r: VerifyReport) => r.drift.map((d) => `${d.code} ${d.operation_id}`).sort();

describe('taskledger verify', () => {
  it('finds no drift in a launched creation and an unfinished one, and counts every row', async () => {
    const w = await world();
    const pages: number[] = [];
    const report = await verify(w.ws, true, (counts) => pages.push(counts.operations));
    expect(report.drift).toEqual([]);
    expect(report.more).toBe(0);
    // Each creation plans workspace attachment, fresh branch, session and launch intent; the open one also
    // its attachment claim, and all five of its steps are observed.
    expect(report.counts).toEqual({
      operations: 2,
      steps: 9,
      events: 1,
      dispatch_claims: 1,
      cleanup_jobs: 0,
      observed: 5,
      unobserved: 0,
    });
    expect(pages).toEqual([1, 2]);
  });

  it('reports each tampered hash, broken invariant and lost effect under its own code', async () => {
    const w = await world();
    const { done, open } = w;
    const hour = t.db.dialect === 'postgres' ? "interval '1 hour'" : 'INTERVAL 1 HOUR';
    await sql(t.db, 'UPDATE task_creation_operations SET actor_binding_hash = ? WHERE id = ?', [
      'f'.repeat(64),
      done.operationId,
    ]);
    await sql(t.db, 'UPDATE event_outbox SET payload_sha256 = ? WHERE operation_id = ?', [
      '0'.repeat(64),
      done.operationId,
    ]);
    await sql(
      t.db,
      `UPDATE task_launch_dispatch_claims SET created_at = created_at - ${hour} WHERE creation_operation_id = ?`,
      [done.operationId],
    );
    await sql(t.db, "UPDATE tasks SET creation_state = 'preparing' WHERE id = ?", [done.task.id]);
    await sql(t.db, 'UPDATE task_launch_dispatch_claims SET evidence_sha256 = ? WHERE creation_operation_id = ?', [
      'd'.repeat(64),
      done.operationId,
    ]);
    await sql(
      t.db,
      "UPDATE task_creation_steps SET evidence_sha256 = ? WHERE operation_id = ? AND kind = 'session_prepare'",
      ['1'.repeat(64), open.operationId],
    );
    // Someone removed the unfinished creation's worktree.
    const [repo] = await sql<{ worktree_path: string }>(
      t.db,
      `SELECT r.worktree_path FROM task_environment_repos r JOIN task_environments e ON e.id = r.environment_id
        WHERE e.task_id = ? AND r.worktree_path IS NOT NULL`,
      [open.task.id],
    );
    rmSync(repo!.worktree_path, { recursive: true, force: true });

    // A dispatch claim whose creation operation the ledger does not hold.
    const ghost = randomUUID();
    await sql(
      t.db,
      `INSERT INTO task_launch_dispatch_claims (id, creation_operation_id, task_id, session_id, workspace_id, idempotency_key,
                                                request_sha256, lifecycle_generation, state, generation, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, 'task-launch/x/y', ?, 1, 'planned', 0, ${t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)'}, ${t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)'})`,
      [randomUUID(), ghost, randomUUID(), randomUUID(), w.ws.workspaceId, 'c'.repeat(64)],
    );

    const report = await verify(w.ws);
    expect(codesOf(report)).toEqual(
      [
        `operation_binding ${done.operationId}`,
        `event_payload ${done.operationId}`,
        `launch_before_event ${done.operationId}`,
        `task_state ${done.operationId}`,
        `dispatch_claim ${done.operationId}`,
        `step_evidence ${open.operationId}`,
        `effect ${open.operationId}`,
        `orphan_row ${ghost}`,
      ].sort(),
    );
    const effect = report.drift.find((d) => d.code === 'effect')!;
    expect(effect.subject).toMatch(/^step fresh_branch_prepare\//);
    expect(effect.message).toMatch(/^recorded succeeded, observed (conflict|absent_proven)/);
    expect(report.drift.find((d) => d.code === 'launch_before_event')!.message).toMatch(/before task\.created at/);
    expect(report.drift.find((d) => d.code === 'dispatch_claim')!.message).toBe(
      'evidence does not hash to its stored hash',
    );

    // Without observation the lost worktree goes unseen; the ledger findings stay.
    const ledgerOnly = await verify(w.ws, false);
    expect(codesOf(ledgerOnly)).toHaveLength(7);
    expect(ledgerOnly.counts.observed).toBe(0);
  });

  describe('the command', () => {
    const cons = captureConsole();

    it('exits 0 on a clean ledger and 1 with the findings listed once one row is tampered', async () => {
      const ws = await seedWorkspace(t.db);
      // One step: the workspace attachment.
      const res = await begin(t.db, ws, { workspace_policy: { mode: 'shared_group', group_id: ws.groupId } });
      const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
      await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
      expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');

      expect(await verifyCommand(['--workspace', ws.workspaceId, '--no-observe'])).toBe(0);
      expect(cons.text()).toContain('checked 1 creation operations: 1 steps, 1 events, 0 dispatch claims');
      expect(cons.text()).toContain('no drift');

      await sql(t.db, 'UPDATE task_creation_steps SET request_sha256 = ? WHERE operation_id = ?', [
        'a'.repeat(64),
        res.operationId,
      ]);
      cons.clear();
      expect(await verifyCommand(['--workspace', ws.workspaceId, '--no-observe'])).toBe(1);
      const text = cons.text();
      // The row's request hash no longer re-derives, and its evidence names the request it was recorded for.
      expect(text).toContain('DRIFT: 2 findings (step_request 1, step_evidence 1)');
      expect(text).toMatch(
        new RegExp(
          `step_request {2}operation ${res.operationId} {2}step workspace_attachment/[0-9a-f]{64}: stored request does not hash to request_sha256`,
        ),
      );

      cons.clear();
      expect(await verifyCommand(['--workspace', ws.workspaceId, '--no-observe', '--json', '--max-drift', '0'])).toBe(
        1,
      );
      const doc = JSON.parse(cons.text()) as VerifyReport;
      expect(doc).toMatchObject({ drift: [], more: 2, counts: { operations: 1, steps: 1 } });
    });
  });
});
