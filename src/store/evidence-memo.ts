/**
 * A step's stored evidence, parsed, validated against its closed schema and
 * re-hashed, memoised per process on every input byte (binding-cache.ts):
 * Complete reads each step's evidence in both phases and its verifiers again,
 * so the same immutable bytes were parsed and validated four times per step.
 * A hit needs the identical evidence bytes, kind, step key and request hash;
 * anything else is derived from scratch. A document that fails validation is
 * never memoised (the error propagates to the caller, which names it).
 *
 * A record seeds it (`recordedEvidence`): the bytes it writes are those of
 * evidence it has just validated for that very step, so Complete's phase A
 * in the same batch, and this process's later reads of the stored bytes,
 * find them verified instead of parsing, validating and hashing them again.
 */
import { canonicalJson, parseCanonical } from '../canonical/canonical-json';
import { domainHash, evidenceHash, STEP_EVIDENCE_DOMAIN } from '../canonical/hash';
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

/** The bytes and hash a record wrote, by the validated evidence object it wrote them for (`recordedEvidence`). */
const written = new WeakMap<StepEvidence, { json: string; sha256: string }>();

/**
 * The RFC 8785 bytes and hash a record writes for `valid` — evidence it has just validated for the step `identity`
 * names — computed once, and remembered as that step's verified stored evidence (a copy parsed from the bytes, as a
 * read of them would give).
 */
export function recordedEvidence(
  stepId: string,
  identity: { kind: string; step_key: string; request_sha256: string },
  valid: StepEvidence,
): { json: string; sha256: string } {
  const json = canonicalJson(valid);
  const sha256 = domainHash(STEP_EVIDENCE_DOMAIN, json);
  memo.get(stepId, [json, identity.kind, identity.step_key, identity.request_sha256], () => ({
    evidence: JSON.parse(json) as StepEvidence,
    sha256,
  }));
  const bytes = { json, sha256 };
  written.set(valid, bytes);
  return bytes;
}

/** The bytes and hash of evidence a record of this transaction wrote (`recordedEvidence`), else computed now. */
export function evidenceBytesOf(evidence: StepEvidence): { json: string; sha256: string } {
  return written.get(evidence) ?? { json: canonicalJson(evidence), sha256: evidenceHash(evidence) };
}
