/**
 * Releasing an external ID (companion notes §2): an operator's action for an
 * identity a person judged abandoned. It clears `external_id` and
 * `external_id_settled_at` on the holder without touching anything else of
 * the task, so a new create with that ID makes a new task. No task revision
 * and no event.
 *
 * A recorded operation (spec "Begin and visibility", `preparing-release`),
 * run as the Store's two transactions:
 * 1. `claimExternalIdRelease` (store/release-claim.ts) inserts the
 *    `external_id_releases` row. A completed holder is released in that
 *    same transaction. A preparing holder (no step unknown or running,
 *    nothing to compensate) moves `preparing -> preparing-release` under the
 *    release's id and a new release generation; a holder between Complete's
 *    phases or already being released is `creation_state_conflict`.
 * 2. failpoint `between_release_claim_and_apply`, then
 *    `applyExternalIdRelease` (store/release-apply.ts): clears the ID, sets
 *    `release_applied` (Complete then answers `CreatedIdentityLost`) and
 *    returns the creation to `preparing`. If this process dies in between,
 *    the reaper's `retry_preparing_release` applies the same release.
 * If the holder changed between the claim's unlocked read and its locks, the
 * claim restarts (at most MAX_HOLDER_CHANGES times).
 *
 * The creation's workers skip any wake-up that arrives while it is
 * `preparing-release`; the reaper's sweep re-sends its wake-ups afterwards.
 */
import { TaskLedgerError } from '../domain/errors';
import type { Db } from '../db/tx';
import { failpoint } from '../failpoints';
import { applyExternalIdRelease } from '../store/release-apply';
import { claimExternalIdRelease } from '../store/release-claim';

export type ReleaseResult =
  | { released: true; release_id: string; task_id: string; operation_id: string; release_applied: boolean }
  | { released: false };

/** Why 5: the holder only moves when a concurrent release or create wins; twice in a row is already rare. */
const MAX_HOLDER_CHANGES = 5;

export async function releaseExternalId(
  db: Db,
  workspaceId: string,
  externalId: string,
  requestedBy: string,
): Promise<ReleaseResult> {
  for (let i = 0; i < MAX_HOLDER_CHANGES; i++) {
    const res = await claimExternalIdRelease(db, workspaceId, externalId, requestedBy);
    switch (res.kind) {
      case 'moved':
        continue;
      case 'none':
        return { released: false };
      case 'released':
        return {
          released: true,
          release_id: res.releaseId,
          task_id: res.taskId,
          operation_id: res.operationId,
          release_applied: false,
        };
      case 'claimed': {
        const { claim } = res;
        await failpoint('between_release_claim_and_apply', {
          operationId: claim.operationId,
          releaseId: claim.releaseId,
        });
        await applyExternalIdRelease(db, claim);
        return {
          released: true,
          release_id: claim.releaseId,
          task_id: claim.taskId,
          operation_id: claim.operationId,
          release_applied: true,
        };
      }
    }
  }
  throw new TaskLedgerError('retry_exhausted', 'the external ID kept changing holder during release', {});
}
