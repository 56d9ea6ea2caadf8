/**
 * RecordLaunchDispatch: the launch's record, once the agent started (one
 * transaction, `runTransaction`). Locks the LaunchTask prefix — workspace 1
 * (share), operation 4.2, task 5.2, identity 6, every step 7 — then the
 * dispatch claim 8.2, the session 9, the new runtime row 10 and, when the
 * launch ran from an outbox delivery, that event 16. It requires what the
 * claim required (operation `completed`, revision one and its `task.created`
 * committed, the task not deleted, the launch intent `armed` and exact), and
 * the claim itself `running` under this generation, owner and a live lease
 * (the compare-and-set every dispatch result goes through). Writes: claim
 * `running -> succeeded` with the runtime handle and canonical evidence,
 * session `running`, one `executors_running` row, the event's delivered mark.
 * Anything else: a typed refusal (`creation_state_conflict`, `stale_claim`),
 * zero writes.
 *
 * One round trip when the claim kept what it verified (`DispatchClaim.verified`,
 * ADR 0029): the same locks in the same order, each check a row count the
 * server makes — the workspace exists, the operation `completed` with the
 * binding hashes the claim verified, the task not deleted, the step rows the
 * claim locked, then the claim's compare-and-set, then revision one and its
 * event and the intent `armed` with the generation and hashes the claim
 * verified (plain reads, no lock; on MySQL the compare-and-set's row-count
 * check is a column of that statement) — then the writes and COMMIT. A
 * check that fails rolls back and starts over on the checked path below,
 * whose JavaScript checks (the plan re-derived, the intent's request and
 * evidence re-verified) give the precise refusal. A connection lost during it
 * is retried: the next attempt reads the claim under its lock and, finding it
 * `succeeded` with this record's evidence, answers that the record took.
 */
import { canonicalJson } from '../canonical/canonical-json';
import { ConflictError } from '../domain/errors';
import { TIER } from '../db/lock-plan';
import { RestartCommand } from '../db/dialect';
import { isConnectionLost } from '../db/connection-loss';
import { runTransaction, type Db, type Tx } from '../db/tx';
import type { StatementResult } from '../db/batch';
import { casDispatchLocked, dispatchEvidenceJson, lockLaunchPrefixLocked, type RuntimeProof } from './launch-dispatch';
import { markDeliveredStatement, type OutboxMark } from './outbox-mark';
import { stepsLockFence } from './step-rows';
import type { ClaimVerified, DispatchClaim } from './types';

type Evidence = { json: string; sha256: string };
type Recorded = { results: Promise<StatementResult[]> } | { earlier: true };

export async function recordLaunchDispatch(
  db: Db,
  claim: DispatchClaim,
  proof: RuntimeProof,
  mark?: OutboxMark,
): Promise<void> {
  const evidence = dispatchEvidenceJson(claim, proof);
  let oneRoundTrip = claim.verified !== undefined;
  // A connection was lost during an attempt (its COMMIT may have taken).
  let lost = false;
  const recorded = await runTransaction<Recorded>(
    db,
    'RecordLaunchDispatch',
    async (tx) => {
      if (oneRoundTrip) {
        oneRoundTrip = false;
        return recordInOneRoundTrip(tx, claim, claim.verified!, proof, evidence, mark);
      }
      const p = await lockLaunchPrefixLocked(tx, claim.operationId, claim.sessionId, claim.owner);
      // After a lost connection (`retryLostCommit`) the claim, read under its lock (a COMMIT still in flight is
      // waited for), says whether the lost COMMIT took — before any refusal, which may be newer than that record.
      if (lost && (await recordedEarlier(tx, claim, evidence))) {
        tx.rollbackOnly();
        return { earlier: true };
      }
      if ('refused' in p)
        throw new ConflictError('creation_state_conflict', `launch no longer legal: ${p.refused}`, {});
      casRecordLocked(tx, claim, proof, evidence);
      return recordRestLocked(tx, claim, proof, mark);
    },
    {
      retryLostCommit: claim.verified !== undefined,
      onRetry: (_attempt, err) => {
        lost ||= isConnectionLost(err);
      },
    },
  );
  if ('earlier' in recorded) return;
  const results = await recorded.results;
  if (mark) mark.marked = results[results.length - 1]?.affected === 1;
}

/** Why the one-round-trip attempt did not commit: it starts over, and the checked path answers precisely. */
const fenceFailed = () => new RestartCommand('RecordLaunchDispatch: a check made by the server failed');

/**
 * The checked path's locks and checks as row counts the server makes, in the same order, then the writes and
 * COMMIT: nothing awaited (ADR 0029).
 */
function recordInOneRoundTrip(
  tx: Tx,
  claim: DispatchClaim,
  v: ClaimVerified,
  proof: RuntimeProof,
  evidence: Evidence,
  mark: OutboxMark | undefined,
): Recorded {
  tx.lockRow(TIER.WORKSPACE, 'workspaces', claim.workspaceId);
  tx.expect(
    { sql: `SELECT state FROM workspaces WHERE id = ? ${tx.forShare}`, params: [claim.workspaceId] },
    1,
    fenceFailed,
  );
  tx.lockOperationRow('task_creation_operations', claim.operationId);
  tx.expect(
    {
      sql: `SELECT id FROM task_creation_operations
             WHERE id = ? AND workspace_id = ? AND task_id = ? AND state = 'completed' AND manifest_hash = ? AND actor_binding_hash = ?
             FOR UPDATE`,
      params: [claim.operationId, claim.workspaceId, claim.taskId, v.manifestHash, v.actorBindingHash],
    },
    1,
    fenceFailed,
  );
  tx.lockRow(TIER.TASK, 'tasks', claim.taskId);
  tx.expect(
    { sql: `SELECT id FROM tasks WHERE id = ? AND lifecycle_state <> 'deleted' FOR UPDATE`, params: [claim.taskId] },
    1,
    fenceFailed,
  );
  tx.lockRow(TIER.IDENTITY, 'task_identities', claim.taskId);
  tx.exec('SELECT state FROM task_identities WHERE task_id = ? FOR UPDATE', [claim.taskId]).catch(() => undefined);
  for (const id of v.stepIds) tx.lockRow(TIER.STEP, 'task_creation_steps', id);
  tx.expect(stepsLockFence(claim.operationId, tx.dialect), v.stepIds.length, fenceFailed);
  // The claim's compare-and-set (8.2) before the last check, which takes no lock: on MySQL its row-count check then
  // travels as a column of that check's statement instead of a statement of its own (ADR 0047).
  casRecordLocked(tx, claim, proof, evidence);
  // Revision one, its `task.created` and the armed intent (rows the locks above hold or that never change): plain
  // reads, checked as one.
  tx.expect(
    {
      sql: `SELECT r.event_id FROM task_revisions r
             WHERE r.task_id = ? AND r.revision = 1
               AND EXISTS (SELECT 1 FROM event_outbox e WHERE e.task_id = ? AND e.revision = 1 AND e.type = 'task.created')
               AND EXISTS (SELECT 1 FROM task_creation_steps s
                            WHERE s.id = ? AND s.operation_id = ? AND s.kind = 'launch_intent' AND s.step_key = ?
                              AND s.state = 'armed' AND s.generation = ? AND s.request_sha256 = ? AND s.evidence_sha256 = ?)`,
      params: [
        claim.taskId,
        claim.taskId,
        v.intent.id,
        claim.operationId,
        claim.sessionId,
        v.intent.generation,
        v.intent.requestSha256,
        v.intent.evidenceSha256,
      ],
    },
    1,
    fenceFailed,
  );
  return recordRestLocked(tx, claim, proof, mark);
}

/** The claim as a COMMIT lost earlier may have left it: `succeeded` under this generation with this evidence. */
async function recordedEarlier(tx: Tx, claim: DispatchClaim, evidence: Evidence): Promise<boolean> {
  tx.lockRow(TIER.DISPATCH_CLAIM, 'task_launch_dispatch_claims', claim.dispatchId);
  const row = await tx.one<{ state: string; generation: number | string; evidence_sha256: string | null }>(
    'SELECT state, generation, evidence_sha256 FROM task_launch_dispatch_claims WHERE id = ? FOR UPDATE',
    [claim.dispatchId],
  );
  return (
    row?.state === 'succeeded' && Number(row.generation) === claim.generation && row.evidence_sha256 === evidence.sha256
  );
}

/**
 * The record's compare-and-set on the claim (`running -> succeeded` under this generation, owner and a live lease,
 * with the runtime handle and evidence), checked with COMMIT (`Tx.expect`): a stale claim changes nothing, and the
 * transaction rolls every other write back.
 */
function casRecordLocked(tx: Tx, claim: DispatchClaim, proof: RuntimeProof, evidence: Evidence): void {
  casDispatchLocked(tx, claim, 'succeeded', ', runtime_handle = ?, evidence_json = ?, evidence_sha256 = ?', [
    canonicalJson(proof.handle),
    evidence.json,
    evidence.sha256,
  ]);
}

/**
 * The writes after the claim's compare-and-set, with COMMIT (one round trip, in this order): the session row is
 * locked by the prefix, the runtime row is new, the delivered event's mark last (outbox 16, the same
 * compare-and-set a delivery's own mark is).
 */
function recordRestLocked(tx: Tx, claim: DispatchClaim, proof: RuntimeProof, mark: OutboxMark | undefined): Recorded {
  tx.lockRow(TIER.SESSION, 'task_sessions', claim.sessionId);
  const runtimeId = globalThis.crypto.randomUUID();
  tx.lockRow(TIER.RUNTIME, 'executors_running', runtimeId);
  if (mark) tx.lockRow(TIER.OUTBOX, 'event_outbox', mark.eventId);
  // Wrapped: a body that returned the promise itself would wait for the COMMIT that follows it.
  return {
    results: tx.commitWith([
      {
        sql: `UPDATE task_sessions SET state = 'running', updated_at = ${tx.now} WHERE id = ?`,
        params: [claim.sessionId],
      },
      {
        sql: `INSERT INTO executors_running (id, session_id, task_id, workspace_id, dispatch_claim_id, runtime_handle, pid, state, started_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ${tx.now}, ${tx.now})`,
        params: [
          runtimeId,
          claim.sessionId,
          claim.taskId,
          claim.workspaceId,
          claim.dispatchId,
          canonicalJson(proof.handle),
          proof.pid,
        ],
      },
      ...(mark ? [markDeliveredStatement(tx.dialect, mark.eventId)] : []),
    ]),
  };
}
