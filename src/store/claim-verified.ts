/**
 * What a dispatch claim verified, kept with the claim for its launch record
 * (ADR 0029): the operation's stored binding hashes, the operation's step
 * rows (the record locks them all) and the armed intent's generation and
 * hashes. Built by both claims — `claimLaunchDispatch` and Complete's phase B
 * (store/launch-claim-in-complete.ts) — from rows they verified under their
 * locks; no I/O, no transaction.
 */
import type { OperationRow } from './operation-guard';
import type { ClaimVerified, StepRow } from './types';

export function claimVerified(
  op: Pick<OperationRow, 'manifest_hash' | 'actor_binding_hash'>,
  steps: readonly Pick<StepRow, 'id'>[],
  intent: Pick<StepRow, 'id' | 'generation' | 'request_sha256' | 'evidence_sha256'>,
): ClaimVerified | undefined {
  // An armed intent always holds evidence; without it there is nothing to compare, and the record checks as before.
  if (intent.evidence_sha256 === null) return undefined;
  return {
    manifestHash: op.manifest_hash,
    actorBindingHash: op.actor_binding_hash,
    stepIds: steps.map((s) => s.id).sort(),
    intent: {
      id: intent.id,
      generation: Number(intent.generation),
      requestSha256: intent.request_sha256,
      evidenceSha256: intent.evidence_sha256,
    },
  };
}
