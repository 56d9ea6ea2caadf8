/**
 * Cleanup of a transferred `remote_contribution_associate` effect, from its
 * proof (provider, connection, contribution, ownership marker, recorded
 * provider handle): delete the marker comment while it still carries the
 * marker and the recorded handle (already gone is fine), then the rows.
 * A comment with the marker but another handle, or a provider that refuses
 * permanently (credentials, contribution gone) -> `unknown`; an unusable
 * connection -> `unknown`; transient or ambiguous provider failures ->
 * `retry`.
 */
import type { RemoteContributionAssociateRequest } from '../../canonical/types';
import { ProviderError } from '../../providers/types';
import type { EffectDeps } from '../contract';
import { contributionRef, readTarget } from './rows';
import { dbReader } from '../../store/effects/row-locks';
import type { CleanupProof } from '../../compensation/cleanup-proof';
import { deleteMarkerComment, messageOf } from './compensation';
import { retryDecision, rowsDecision, unknownDecision, type CleanupDecision } from '../../cleanup/decision';

export async function cleanAssociation(deps: EffectDeps, proof: CleanupProof): Promise<CleanupDecision> {
  const d = proof.detail as Record<string, string>;
  const req = {
    provider: d.provider,
    workspace_id: proof.workspace_id,
    repository_id: d.repository_id,
    contribution_kind: d.contribution_kind,
    contribution_id: d.contribution_id,
    connection_id: d.connection_id,
    task_id: proof.task_id,
  } as RemoteContributionAssociateRequest;
  if (req.provider !== 'github' && req.provider !== 'gitlab') {
    return unknownDecision('proof_invalid', 'the proof names no known provider');
  }
  const target = await readTarget(dbReader(deps.db), req);
  if (!target.ok) return unknownDecision('provider_unreachable', target.message);
  const ref = contributionRef(req, target.target);
  try {
    const r = await deleteMarkerComment(deps.providers[req.provider], ref, d.ownership_marker!, d.provider_handle!);
    if (r === 'mismatch') return unknownDecision('handle_mismatch', 'the marker comment has another handle');
    return rowsDecision('marker comment gone');
  } catch (err) {
    if (err instanceof ProviderError && err.failureClass === 'permanent') {
      return unknownDecision('provider_refused', messageOf(err));
    }
    return retryDecision('provider_failed', messageOf(err));
  }
}
