/**
 * Cleanup jobs (`task_resource_cleanup_jobs`): the durable owner of an
 * effect a compensation transferred. FindDueCleanupJobs (plain read),
 * ClaimCleanupJob and FinishCleanupJob (one transaction each).
 *
 * Locks: workspace 1 (FOR SHARE), the job row 8.1 (FOR UPDATE); Finish then
 * the operation-owned effect rows the job's proof lists (tiers 9-15,
 * ascending, FOR UPDATE) and any extra row it reads (shared).
 *
 * - Due: `pending`; `retry_wait` whose `next_attempt_at` passed; `running`
 *   whose lease expired; agent stops (`launch_dispatch`) first, since a
 *   deleted task's worktree and session jobs wait for them (a worker died mid-job: every job re-observes the
 *   world from its proof before acting, so taking it over is safe).
 * - Claim: due -> `running`, generation + 1, attempt + 1, lease (database
 *   clock). A job that is not due (anymore) returns null, zero writes.
 * - Finish: compare-and-set on the claim (running, same generation and
 *   owner, lease alive) to `done` (finished_at), `retry_wait` (next attempt
 *   by the step back-off) or `unknown` (proof no longer matches the world:
 *   left for an operator, with `error_code`/`error_json`; the closed state
 *   set has no `failed`). With `rows`, `done` also undoes the proof's
 *   operation-owned rows in the same transaction — only when every row is
 *   still exactly ours or already undone and nothing blocks; otherwise
 *   nothing is written but `unknown` (`proof_mismatch`).
 * No event.
 */
import { canonicalJson } from '../canonical/canonical-json';
import { ConflictError } from '../domain/errors';
import type { StepKind } from '../domain/vocab';
import { TIER } from '../db/lock-plan';
import { readRows, runTransaction, type Db, type Tx } from '../db/tx';
import {
  ownedRowLocks,
  readOwnedRowsLocked,
  undoOwnedRowsLocked,
  type OwnedRow,
} from './effects/compensate-owned-rows';
import { takeLocks, type LockNeed } from './effects/row-locks';
import { DEFAULT_LEASE_MS } from './step-claims';
import { retryDelayMs } from './step-results';

export interface CleanupJobClaim {
  readonly id: string;
  readonly workspaceId: string;
  readonly taskId: string;
  readonly operationId: string;
  readonly stepId: string | null;
  readonly kind: StepKind | 'launch_dispatch';
  readonly reason: string;
  readonly proofJson: string;
  readonly proofSha256: string;
  readonly generation: number;
  readonly attempt: number;
  readonly owner: string;
}

function dueSql(dialect: Db['dialect']): string {
  const now = dialect === 'postgres' ? 'clock_timestamp()' : 'NOW(3)';
  return `(state = 'pending' OR (state = 'retry_wait' AND (next_attempt_at IS NULL OR next_attempt_at <= ${now}))
           OR (state = 'running' AND lease_expires_at < ${now}))`;
}

export async function findDueCleanupJobs(
  db: Db,
  options: { workspaceId?: string; limit?: number } = {},
): Promise<string[]> {
  const limit = Math.max(1, Math.floor(options.limit ?? 100));
  const rows = await readRows<{ id: string }>(
    db,
    `SELECT id FROM task_resource_cleanup_jobs WHERE ${dueSql(db.dialect)}
       ${options.workspaceId === undefined ? '' : 'AND workspace_id = ?'}
     ORDER BY CASE WHEN kind = 'launch_dispatch' THEN 0 ELSE 1 END, created_at, id LIMIT ${limit}`,
    options.workspaceId === undefined ? [] : [options.workspaceId],
  );
  return rows.map((r) => r.id);
}

interface JobRow {
  id: string;
  workspace_id: string;
  task_id: string;
  operation_id: string;
  step_id: string | null;
  kind: StepKind | 'launch_dispatch';
  reason: string;
  proof_json: string;
  proof_sha256: string;
  generation: number;
  attempt: number;
}

/** Workspace 1 (shared), then the job row 8.1 (FOR UPDATE). */
async function lockJobLocked(tx: Tx, jobId: string): Promise<JobRow | undefined> {
  const peek = await tx.one<{ workspace_id: string }>(
    'SELECT workspace_id FROM task_resource_cleanup_jobs WHERE id = ?',
    [jobId],
  );
  if (!peek) return undefined;
  tx.lockRow(TIER.WORKSPACE, 'workspaces', peek.workspace_id);
  await tx.rows(`SELECT id FROM workspaces WHERE id = ? ${tx.forShare}`, [peek.workspace_id]);
  tx.lockRow(TIER.CLEANUP, 'task_resource_cleanup_jobs', jobId);
  const row = await tx.one<JobRow>(
    `SELECT id, workspace_id, task_id, operation_id, step_id, kind, reason, proof_json, proof_sha256, generation, attempt
       FROM task_resource_cleanup_jobs WHERE id = ? FOR UPDATE`,
    [jobId],
  );
  return row && { ...row, generation: Number(row.generation), attempt: Number(row.attempt) };
}

export async function claimCleanupJob(
  db: Db,
  jobId: string,
  owner: string,
  leaseMs: number = DEFAULT_LEASE_MS,
): Promise<CleanupJobClaim | null> {
  return runTransaction(db, 'ClaimCleanupJob', async (tx) => {
    const job = await lockJobLocked(tx, jobId);
    if (!job) return null;
    const changed = await tx.exec(
      `UPDATE task_resource_cleanup_jobs
          SET state = 'running', generation = generation + 1, attempt = attempt + 1, lease_owner = ?,
              lease_expires_at = ${tx.nowPlusMs}, updated_at = ${tx.now}
        WHERE id = ? AND generation = ? AND ${dueSql(tx.dialect)}`,
      [owner, leaseMs, jobId, job.generation],
    );
    if (changed !== 1) return null;
    return {
      id: job.id,
      workspaceId: job.workspace_id,
      taskId: job.task_id,
      operationId: job.operation_id,
      stepId: job.step_id,
      kind: job.kind,
      reason: job.reason,
      proofJson: job.proof_json,
      proofSha256: job.proof_sha256,
      generation: job.generation + 1,
      attempt: job.attempt + 1,
      owner,
    };
  });
}

export type CleanupJobEnd = 'done' | 'retry_wait' | 'unknown';

export interface CleanupFinish {
  state: CleanupJobEnd;
  /** Machine reason for `retry_wait`/`unknown`. */
  errorCode?: string;
  message?: string;
  /** With `done`: the proof's operation-owned rows to undo in this transaction. */
  rows?: OwnedRow[];
  /** Further rows read under a shared lock (e.g. the session's runtime). */
  extraLocks?: LockNeed[];
  /** Under the locks: why the rows must not be undone (e.g. a runtime exists), or null. */
  blocked?: (tx: Tx) => Promise<string | null>;
  /**
   * With `retry_wait`: the visit was not an attempt (the job belongs to another host's worker): the attempt count
   * is given back and the job is due again after UNCOUNTED_RETRY_MS, without back-off.
   */
  uncounted?: boolean;
}

/** Why 5 s: the host that can do the job finds it at its next pass rather than after a grown back-off. */
const UNCOUNTED_RETRY_MS = 5_000;

export async function finishCleanupJob(
  db: Db,
  claim: CleanupJobClaim,
  finish: CleanupFinish,
): Promise<{ state: CleanupJobEnd; errorCode: string | null }> {
  return runTransaction(db, 'FinishCleanupJob', async (tx) => {
    const job = await lockJobLocked(tx, claim.id);
    const live = await tx.rows(
      `SELECT id FROM task_resource_cleanup_jobs
        WHERE id = ? AND state = 'running' AND generation = ? AND lease_owner = ? AND lease_expires_at > ${tx.now}`,
      [claim.id, claim.generation, claim.owner],
    );
    if (!job || live.length !== 1) {
      throw new ConflictError(
        'stale_claim',
        'cleanup job claim is stale: generation, owner or lease no longer matches',
        {
          cleanup_job_id: claim.id,
        },
      );
    }
    let state = finish.state;
    const uncounted = finish.uncounted === true && state === 'retry_wait';
    let errorCode = finish.errorCode ?? null;
    let message = finish.message ?? null;
    if (state === 'done' && finish.rows && finish.rows.length > 0) {
      await takeLocks(tx, [...ownedRowLocks(finish.rows), ...(finish.extraLocks ?? [])]);
      const found = await readOwnedRowsLocked(tx, finish.rows);
      const blockedBy = finish.blocked ? await finish.blocked(tx) : null;
      const foreign = found.filter((f) => f.presence === 'foreign');
      if (blockedBy !== null || foreign.length > 0) {
        state = 'unknown';
        errorCode = blockedBy !== null ? 'effect_beyond_rows' : 'proof_mismatch';
        message =
          blockedBy ?? `${foreign.map((f) => `${f.row.table} ${f.row.key}`).join(', ')} no longer match the proof`;
      } else {
        await undoOwnedRowsLocked(tx, found);
      }
    }
    const changed = await tx.exec(
      `UPDATE task_resource_cleanup_jobs
          SET state = ?, lease_owner = NULL, lease_expires_at = NULL, updated_at = ${tx.now},
              attempt = attempt - ?,
              next_attempt_at = ${state === 'retry_wait' ? tx.nowPlusMs : 'NULL'},
              finished_at = ${state === 'done' ? tx.now : 'NULL'},
              error_code = ?, error_json = ?
        WHERE id = ? AND state = 'running' AND generation = ? AND lease_owner = ?`,
      [
        state,
        uncounted ? 1 : 0,
        ...(state === 'retry_wait' ? [uncounted ? UNCOUNTED_RETRY_MS : retryDelayMs(claim.attempt)] : []),
        errorCode === null ? null : errorCode.slice(0, 64),
        errorCode === null ? null : canonicalJson({ code: errorCode, message: (message ?? '').slice(0, 2000) }),
        claim.id,
        claim.generation,
        claim.owner,
      ],
    );
    if (changed !== 1)
      throw new ConflictError('stale_claim', 'cleanup job changed while finishing', { cleanup_job_id: claim.id });
    return { state, errorCode };
  });
}
