/**
 * Public surface of the canonical bindings: RFC 8785 bytes, domain-separated
 * hashes and lock keys, completion tokens, closed schemas and their typed
 * validators. Import from here unless you need one schema fragment.
 */
export * from './types';
export * from './observation-types';
export { assertPlainJson, canonicalBytes, canonicalJson, jsonPointer, parseCanonical } from './canonical-json';
export type { ParseCanonicalOptions } from './canonical-json';
export * from './hash';
export * from './completion-token';
export {
  validateActorBinding,
  validateCompensationProof,
  validateCreationPlan,
  validateStepEvidence,
  validateStepFailure,
  validateStepRequest,
} from './validate';
export type { EvidenceExpectation } from './validate';
export { assertSortedUnique, compareCanonicalKeys, sortCanonical } from './sorted-lists';
export type { CanonicalKey } from './sorted-lists';
export { derivedStepKey } from './plan-invariants';
export {
  COMPENSATION_OUTCOMES,
  FAILURE_CLASSES,
  GROUP_MEMBER_ROLES,
  PROVIDER_CONTRIBUTION_KIND,
  BRANCH_PATTERN,
  COMMIT_PATTERN,
  SHA256_PATTERN,
  TIMESTAMP_PATTERN,
  UUID_PATTERN,
} from './schemas';
export type { GroupMemberRole } from './schemas';
/** Every closed JSON Schema, for schema dumps and documentation. */
export * as schemas from './schemas';
