/**
 * A step's stored evidence, parsed, validated against its closed schema and
 * re-hashed, memoised per process on every input byte (binding-cache.ts):
 * Complete reads each step's evidence in both phases and its verifiers again,
 * so the same immutable bytes were parsed and validated four times per step.
 * A hit needs the identical evidence bytes, kind, step key and request hash;
 * anything else is derived from scratch. A document that fails validation is
 * never memoised (the error propagates to the caller, which names it).
 */
import { parseCanonical } from '../canonical/canonical-json';
import { evidenceHash } from '../canonical/hash';
import type { StepEvidence } from '../canonical/types';
import { validateStepEvidence } from '../canonical/validate';
import { VerifiedMemo } from './binding-cache';
import type { StepRow } from './types';

export interface VerifiedEvidence {
  evidence: StepEvidence;
  /** SHA-256 of the evidence's RFC 8785 bytes, to compare with the stored `evidence_sha256`. */
  sha256: string;
}

const memo = new VerifiedMemo<VerifiedEvidence>();

/** Throws the validator's error when the stored bytes are not a valid evidence document for this step. */
export function storedEvidenceOf(step: StepRow & { evidence_json: string }): VerifiedEvidence {
  return memo.get(step.id, [step.evidence_json, step.kind, step.step_key, step.request_sha256], () => {
    const evidence = validateStepEvidence(parseCanonical(step.evidence_json), {
      kind: step.kind,
      step_key: step.step_key,
      request_sha256: step.request_sha256,
    });
    return { evidence, sha256: evidenceHash(evidence) };
  });
}
