/**
 * The `retry_preparing_release` RecoveryAction (run by runtime/recover.ts
 * under the operation's recovery claim): a releaser committed its claim
 * (`preparing -> preparing-release`) and died before the apply. Recovery
 * applies that same release — the operation's `release_operation_id` at its
 * `release_generation` — with the Store's apply (store/release-apply.ts),
 * which compares both under its locks: a stale read here can only become a
 * typed refusal, and a releaser that finished meanwhile makes it a replay.
 */
import { readRows, type Db } from '../db/tx';
import { ConflictError } from '../domain/errors';
import type { Logger } from '../log';
import { applyExternalIdRelease, type ReleaseApplyResult } from '../store/release-apply';

export async function retryPreparingRelease(db: Db, log: Logger, operationId: string): Promise<ReleaseApplyResult> {
  const [op] = await readRows<{ release_operation_id: string | null; release_generation: number | string }>(
    db,
    'SELECT release_operation_id, release_generation FROM task_creation_operations WHERE id = ?',
    [operationId],
  );
  if (!op?.release_operation_id) {
    throw new ConflictError('creation_state_conflict', 'preparing-release without a release operation', {
      operation_id: operationId,
    });
  }
  const r = await applyExternalIdRelease(db, {
    releaseId: op.release_operation_id,
    generation: Number(op.release_generation),
  });
  log.info(
    { operation_id: operationId, release_id: r.releaseId, replayed: r.replayed },
    'external-ID release applied by recovery',
  );
  return r;
}
