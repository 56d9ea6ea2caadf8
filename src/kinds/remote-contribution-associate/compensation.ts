/**
 * Undo of `remote_contribution_associate`: the marker comment/note the step
 * posted on the provider, then the operation-owned association row.
 *
 * 1. From the step's `present_exact` evidence: provider handle, ownership
 *    marker and association row hash. Read the provider target (connection
 *    and repository slug); unusable -> transfer (`provider_unreachable`).
 * 2. Outside any transaction: find the comment carrying the marker. Found
 *    with the recorded handle -> delete it (a 404 on delete: already gone);
 *    found with another handle -> transfer (`handle_mismatch`); not found ->
 *    already gone. A permanent provider refusal (401/403/404 on the
 *    contribution) -> transfer (`provider_refused`); transient or ambiguous
 *    -> `retry_wait` (the comment may still exist, so never `compensated`).
 * 3. One Store transaction deletes the association row while it still
 *    hashes to the evidence (only the operation-owned row, located by its
 *    identity and bound to the step's idempotency key through that hash),
 *    else transfers; records `compensated`.
 */
import type { RemoteContributionAssociateRequest } from '../../canonical/types';
import { ProviderError, type ContributionProvider, type ContributionRef } from '../../providers/types';
import type { OwnedRow } from '../../store/effects/compensate-owned-rows';
import { ASSOCIATION_TABLE, associationIdentity, contributionRef, readTarget } from './rows';
import { dbReader } from '../../store/effects/row-locks';
import type { CompensationClaim } from '../../store/types';
import { recordPlain, settleRows, successObservation, transferRows, type RowsUndo } from '../../compensation/record';
import type { CompensationUndo } from '../contract';

type Req = RemoteContributionAssociateRequest;

export function associationOwnedRows(req: Req, rowSha256: string): OwnedRow[] {
  return [{ table: ASSOCIATION_TABLE, key: associationIdentity(req), row_sha256: rowSha256, undone_sha256: null }];
}

export function associationDetail(req: Req, marker: string, handle: string) {
  return {
    provider: req.provider,
    connection_id: req.connection_id,
    repository_id: req.repository_id,
    contribution_kind: req.contribution_kind,
    contribution_id: req.contribution_id,
    ownership_marker: marker,
    provider_handle: handle,
  };
}

export function messageOf(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).slice(0, 500);
}

/** Deletes the marker comment if it is still there with `handle`: 'gone' | 'mismatch'. Provider errors propagate. */
export async function deleteMarkerComment(
  provider: ContributionProvider,
  ref: ContributionRef,
  marker: string,
  handle: string,
): Promise<'gone' | 'mismatch'> {
  const found = await provider.findLinkComment(ref, marker);
  if (found === null) return 'gone';
  if (found.handle !== handle) return 'mismatch';
  try {
    await provider.deleteLinkComment(ref, found.handle);
  } catch (err) {
    if (!(err instanceof ProviderError && err.status === 404)) throw err;
  }
  return 'gone';
}

export const undoRemoteContribution: CompensationUndo = async (deps, claim: CompensationClaim) => {
  const req = claim.request as Req;
  const obs = successObservation(claim);
  if (
    obs === null ||
    typeof obs.provider_handle !== 'string' ||
    typeof obs.ownership_marker !== 'string' ||
    typeof obs.association_row_sha256 !== 'string'
  ) {
    return recordPlain(deps, claim, 'unknown', 'the step has no present_exact evidence naming its comment');
  }
  const marker = obs.ownership_marker;
  const handle = obs.provider_handle;
  const spec: RowsUndo = {
    rows: associationOwnedRows(req, obs.association_row_sha256),
    detail: associationDetail(req, marker, handle),
  };
  const target = await readTarget(dbReader(deps.db), req);
  if (!target.ok) return transferRows(deps, claim, spec, 'provider_unreachable', target.message);
  const ref = contributionRef(req, target.target);
  let result: 'gone' | 'mismatch' | ProviderError | Error;
  try {
    result = await deleteMarkerComment(deps.providers[req.provider], ref, marker, handle);
  } catch (err) {
    result = err instanceof Error ? err : new Error(String(err));
  }
  if (result === 'mismatch') {
    return transferRows(deps, claim, spec, 'handle_mismatch', 'the marker comment has another handle than recorded');
  }
  if (result instanceof ProviderError && result.failureClass === 'permanent') {
    return transferRows(deps, claim, spec, 'provider_refused', messageOf(result));
  }
  if (result instanceof Error) return recordPlain(deps, claim, 'retry_wait', `provider: ${messageOf(result)}`);
  return settleRows(deps, claim, spec);
};
