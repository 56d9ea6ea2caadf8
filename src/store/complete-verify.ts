/**
 * The exact Complete predicate, evaluated under Complete's locks (both
 * phases). Never begins a transaction; takes only tiers >= 7 in order.
 *
 * Requires: every plan step has exactly its row; every request re-derives
 * from stored bytes and the manifest; every non-launch step `succeeded` with
 * `present_exact` evidence whose RFC 8785 bytes re-hash to `evidence_sha256`
 * and name the step; nothing to compensate; a launch intent exactly when the
 * start policy is `immediate`, and then `armed` with exact evidence; and the
 * rows Begin inserted are byte-equivalent to the manifest's `database_rows`;
 * and every succeeded/armed step's effect rows are byte-equivalent to its
 * evidence (`verifyCompletePredicateLocked`, through the registry in
 * `effects/verify.ts`: tiers 8..15, shared, one ascending order, including the
 * planned task environments 11.1 that `verifyPlannedRowsLocked` then re-reads).
 */
import { rowHash } from '../canonical/hash';
import type { CreationPlan } from '../canonical/types';
import { ConflictError } from '../domain/errors';
import { TIER } from '../db/lock-plan';
import { bool, statementsIssued, type Tx } from '../db/tx';
import { forceIndexSql, forShareSql } from '../db/dialect';
import type { Dialect } from '../db/config';
import type { Statement } from '../db/batch';
import { settledValue } from './settled';
import { effectRowLockNeeds, verifyAllEffectRowsLocked, type LockNeed } from './effects/verify';
import { storedEvidenceOf } from './evidence-memo';
import { ENVIRONMENT_COLUMNS } from './effects/row-documents';
// Registers the remote-contribution verifier (its module owns the row document).
import '../kinds/remote-contribution-associate/ledger';
import { COMPENSATION_PENDING, verifyStepRequest, verifyStepSet } from './step-rows';
import type { StepRow } from './types';
import {
  IDENTITY_ROW_READ,
  PLANNED_IDENTITY_COLUMNS,
  PLANNED_TASK_COLUMNS,
  pickColumns,
  TASK_ROW_READ,
} from './task-row-reads';

function fail(why: string, detail: Record<string, unknown> = {}): never {
  throw new ConflictError('creation_state_conflict', `Complete predicate does not hold: ${why}`, detail);
}

export function verifyStoredEvidence(step: StepRow): void {
  if (step.evidence_json === null || step.evidence_sha256 === null)
    fail(`step ${step.kind}/${step.step_key} has no evidence`);
  let stored;
  try {
    stored = storedEvidenceOf({ ...step, evidence_json: step.evidence_json });
  } catch (err) {
    throw new ConflictError('evidence_mismatch', `step ${step.kind}/${step.step_key}: stored evidence is invalid`, {
      step_id: step.id,
      cause: (err as Error).message,
    });
  }
  const { evidence, sha256 } = stored;
  if (sha256 !== step.evidence_sha256) {
    throw new ConflictError(
      'evidence_mismatch',
      `step ${step.kind}/${step.step_key}: evidence does not hash to evidence_sha256`,
      {
        step_id: step.id,
      },
    );
  }
  if (evidence.effect !== 'present_exact') fail(`step ${step.kind}/${step.step_key} evidence is ${evidence.effect}`);
}

export function verifyCompletePredicate(steps: StepRow[], plan: CreationPlan): void {
  verifyStepSet(steps, plan);
  const launches = steps.filter((s) => s.kind === 'launch_intent');
  if ((plan.start_policy === 'immediate') !== (launches.length === 1) || launches.length > 1) {
    fail('launch intent does not match the start policy', { start_policy: plan.start_policy });
  }
  for (const step of steps) {
    verifyStepRequest(step, plan);
    if (COMPENSATION_PENDING.has(step.compensation_state) || step.compensation_state !== 'none') {
      fail(`step ${step.kind}/${step.step_key} has compensation ${step.compensation_state}`);
    }
    const wanted = step.kind === 'launch_intent' ? 'armed' : 'succeeded';
    if (step.state !== wanted)
      fail(`step ${step.kind}/${step.step_key} is ${step.state}, not ${wanted}`, { step_id: step.id });
    verifyStoredEvidence(step);
  }
}

/** The task environments Begin inserted (11.1, shared): Complete re-reads them. */
function plannedEnvironmentLocks(plan: CreationPlan): LockNeed[] {
  return plan.database_rows
    .filter((r) => r.table === 'task_environments')
    .map((r) => ({
      tier: TIER.ENVIRONMENT,
      table: 'task_environments',
      key: r.key,
      where: 'id = ?',
      params: [r.key],
      mode: 'share',
      reads: ENVIRONMENT_COLUMNS,
    }));
}

/** Every lock above the steps (7) Complete's verification takes for these step rows. */
export function completeLockNeeds(steps: readonly StepRow[], plan: CreationPlan): LockNeed[] {
  return [...plannedEnvironmentLocks(plan), ...effectRowLockNeeds(steps)];
}

/** The Complete predicate plus byte-equivalence of every step's effect rows. */
export async function verifyCompletePredicateLocked(tx: Tx, steps: StepRow[], plan: CreationPlan): Promise<void> {
  verifyCompletePredicate(steps, plan);
  await verifyAllEffectRowsLocked(tx, steps, plannedEnvironmentLocks(plan));
}

/**
 * The reads of `verifyPlannedRowsLocked`: the task, its identity, repositories and environments. The environments
 * are read under their shared locks (11.1), or plainly when the transaction already holds every planned one
 * (`heldEnvironments`; always so in Complete, whose effect-row locks take them first in the same round trip, and in
 * the ledger batch, whose union took them; with none planned there is nothing to hold): a row beyond the plan fails
 * the check either way. Plain, a batch can send them early (ADR 0030).
 */
export function plannedRowsStatements(
  dialect: Dialect,
  plan: CreationPlan,
  heldEnvironments: boolean,
): [Statement, Statement, Statement, Statement] {
  return [
    // Answered by the guard's locks of the same rows, which read these columns (ADR 0034).
    { sql: TASK_ROW_READ, params: [plan.task_id] },
    { sql: IDENTITY_ROW_READ, params: [plan.task_id] },
    {
      sql: 'SELECT task_id, repository_id, workspace_id, position, base_branch, fresh_branch FROM task_repositories WHERE task_id = ?',
      params: [plan.task_id],
    },
    {
      sql: `SELECT id, workspace_id, task_id, kind FROM task_environments ${forceIndexSql(dialect, 'ix_task_environments_task_id')}
        WHERE task_id = ? AND operation_id IS NOT NULL ORDER BY id${heldEnvironments ? '' : ` ${forShareSql(dialect)}`}`,
      params: [plan.task_id],
    },
  ];
}

/**
 * Re-reads the rows Begin inserted and proves them byte-equivalent to the
 * manifest (`database_rows`). Locks task environments (11.1, FOR SHARE).
 */
export async function verifyPlannedRowsLocked(tx: Tx, plan: CreationPlan): Promise<void> {
  const actual: { table: string; key: string; row_sha256: string }[] = [];
  const envIds = plan.database_rows.filter((r) => r.table === 'task_environments').map((r) => r.key);
  let held = true;
  for (const id of [...envIds].sort()) held = tx.lockRow(TIER.ENVIRONMENT, 'task_environments', id) === 'held' && held;
  // One round trip (Tx.batch); the environments' shared locks are the only locks, and come last as before.
  const [taskRead, identRead, reposRead, envsRead] = plannedRowsStatements(tx.dialect, plan, held);
  const [task, ident, repos, envs] = await Promise.all([
    tx.one<Record<string, unknown>>(taskRead.sql, [...taskRead.params]),
    tx.one<Record<string, unknown>>(identRead.sql, [...identRead.params]),
    tx.rows<Record<string, unknown>>(reposRead.sql, [...reposRead.params]),
    tx.rows<Record<string, unknown>>(envsRead.sql, [...envsRead.params]),
  ]);
  if (!task) fail('the task row is gone');
  actual.push({ table: 'tasks', key: plan.task_id, row_sha256: rowHash(pickColumns(task, PLANNED_TASK_COLUMNS)) });
  if (!ident) fail('the retained identity is gone');
  actual.push({
    table: 'task_identities',
    key: plan.task_id,
    row_sha256: rowHash(pickColumns(ident, PLANNED_IDENTITY_COLUMNS)),
  });
  for (const r of repos) {
    const doc = { ...r, position: Number(r.position), fresh_branch: bool(r.fresh_branch) };
    actual.push({
      table: 'task_repositories',
      key: `${String(r.task_id)}:${String(r.repository_id)}`,
      row_sha256: rowHash(doc),
    });
  }
  for (const e of envs) actual.push({ table: 'task_environments', key: String(e.id), row_sha256: rowHash({ ...e }) });
  const sortKey = (r: { table: string; key: string }) => `${r.table}\u0000${r.key}`;
  actual.sort((a, b) => (sortKey(a) < sortKey(b) ? -1 : sortKey(a) > sortKey(b) ? 1 : 0));
  const expected = plan.database_rows;
  const same =
    actual.length === expected.length &&
    actual.every(
      (a, i) =>
        a.table === expected[i]!.table && a.key === expected[i]!.key && a.row_sha256 === expected[i]!.row_sha256,
    );
  if (!same) {
    throw new ConflictError('evidence_mismatch', 'rows Begin inserted are not byte-equivalent to the manifest', {
      task_id: plan.task_id,
    });
  }
}

/**
 * Complete's whole verification of these step rows (both phases, and phase A in the arming batch): the predicate and
 * every effect row (`verifyCompletePredicateLocked`) and the rows Begin inserted (`verifyPlannedRowsLocked`),
 * issued together — one round trip, the effect rows' locks first; the predicate's failure is the one reported when
 * both fail.
 */
export async function verifyCompletionLocked(tx: Tx, steps: StepRow[], plan: CreationPlan): Promise<void> {
  const [effects, planned] = await Promise.allSettled([
    verifyCompletePredicateLocked(tx, steps, plan),
    verifyPlannedRowsLocked(tx, plan),
  ]);
  settledValue(effects);
  settledValue(planned);
}

/**
 * The statements `verifyCompletionLocked` sends for these rows (its one round trip), recorded without a database
 * (`statementsIssued`): phase B guesses them from the step rows its process committed (ADR 0021). None when the
 * predicate already fails on them.
 */
export async function completionStatements(
  dialect: Dialect,
  steps: readonly StepRow[],
  plan: CreationPlan,
): Promise<Statement[]> {
  const issued = await statementsIssued(dialect, (tx) => verifyCompletionLocked(tx, [...steps], plan));
  // The task and identity reads are answered by the guard's locks, which the guess follows (ADR 0034): never sent.
  return issued.filter((s) => s.sql !== TASK_ROW_READ && s.sql !== IDENTITY_ROW_READ);
}
