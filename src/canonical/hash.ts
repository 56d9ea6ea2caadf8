/**
 * Domain-separated SHA-256 hashes of canonical documents, idempotency keys and
 * lock-key digests.
 *
 * Contract:
 * - `domainHash(domain, bytes)` = lowercase hex
 *   SHA-256(ASCII(domain) || 0x00 || bytes); a string `bytes` is UTF-8 encoded.
 *   The domain must be non-empty printable ASCII (no NUL), so the separator is
 *   unambiguous.
 * - Each document hash (`manifestHash`, `actorBindingHash`, ...) is
 *   `domainHash(<its domain>, RFC8785(document))`; documents are canonicalized
 *   here, never hashed as given text (see `canonical-json.ts`);
 *   `hashedDocument(domain, document)` answers that text with its hash, for a
 *   writer that stores both. These functions do not validate the document's
 *   schema: validate first (`validate.ts`).
 * - `idempotencyKey(op, kind, stepKey, requestSha256)` = domainHash of the UTF-8
 *   parts joined by 0x00; a part containing NUL is rejected.
 * - `lockKeyDigest(domain, parts)` = raw 32-byte SHA-256(ASCII(domain) || 0x00
 *   || parts joined by 0x00) (companion notes §1); `advisoryLockId(digest)` is
 *   its first 8 bytes as a signed big-endian int64, for `pg_advisory_xact_lock`.
 */
import { createHash, hash } from 'node:crypto';
import { ValidationError } from '../domain/errors';
import type { StepKind } from '../domain/vocab';
import { canonicalJson } from './canonical-json';
import type {
  ActorBindingDocument,
  CompensationProof,
  CreationPlan,
  Sha256Hex,
  StepEvidence,
  StepRequest,
} from './types';

export const PLAN_DOMAIN = 'kandev/task-creation-plan/v1';
export const ACTOR_DOMAIN = 'kandev/task-creation-actor/v1';
export const STEP_REQUEST_DOMAIN = 'kandev/task-creation-step-request/v1';
export const STEP_EVIDENCE_DOMAIN = 'kandev/task-creation-step-evidence/v1';
export const CREATE_REQUEST_DOMAIN = 'kandev/task-creation-request/v1';
export const ROW_DOMAIN = 'kandev/task-creation-row/v1';
export const IDEMPOTENCY_DOMAIN = 'kandev/task-creation-step-idempotency/v1';
export const COMPENSATION_DOMAIN = 'kandev/task-creation-compensation/v1';
export const CLEANUP_PROOF_DOMAIN = 'kandev/task-resource-cleanup-proof/v1';
export const OUTBOX_PAYLOAD_DOMAIN = 'kandev/task-event-payload/v1';

/** Lock-key domains of the companion notes (absent-row identities). */
export const LOCK_KEY_DOMAINS = ['workspace-identity/v1', 'task-external-id/v1', 'task-id/v1'] as const;
export type LockKeyDomain = (typeof LOCK_KEY_DOMAINS)[number];

const NUL = Buffer.from([0]);
const PRINTABLE_ASCII = /^[\x20-\x7e]+$/;

/** `domain` and the NUL after it, as text; checked once per domain (the protocol names a dozen). */
const prefixes = new Map<string, string>();

function domainPrefixText(domain: string): string {
  const known = prefixes.get(domain);
  if (known !== undefined) return known;
  if (typeof domain !== 'string' || !PRINTABLE_ASCII.test(domain)) {
    throw new ValidationError('domain', 'hash domain must be non-empty printable ASCII', 'invalid_document');
  }
  const prefix = `${domain}\u0000`;
  if (prefixes.size < 64) prefixes.set(domain, prefix);
  return prefix;
}

function domainPrefix(domain: string): Buffer {
  return Buffer.from(domainPrefixText(domain), 'ascii');
}

function joinNul(parts: readonly string[], what: string): Buffer {
  const chunks: Buffer[] = [];
  parts.forEach((part, i) => {
    if (typeof part !== 'string') throw new ValidationError(`${what}/${i}`, 'must be a string', 'invalid_document');
    if (part.includes('\u0000')) {
      throw new ValidationError(`${what}/${i}`, 'must not contain a NUL character', 'invalid_document');
    }
    if (i > 0) chunks.push(NUL);
    chunks.push(Buffer.from(part, 'utf8'));
  });
  return Buffer.concat(chunks);
}

/** Lowercase hex SHA-256(ASCII(domain) || 0x00 || bytes). */
export function domainHash(domain: string, bytes: Buffer | string): Sha256Hex {
  // One-shot `crypto.hash` over one input: half the cost of a Hash object fed twice for a row document. A string is
  // hashed as UTF-8, the prefix is ASCII, so the bytes are the contract's.
  const prefix = domainPrefixText(domain);
  return typeof bytes === 'string'
    ? hash('sha256', prefix + bytes, 'hex')
    : hash('sha256', Buffer.concat([Buffer.from(prefix, 'ascii'), bytes]), 'hex');
}

/** A document's RFC 8785 text and its hash under a domain. */
export interface HashedDocument {
  text: string;
  sha256: Sha256Hex;
}

/**
 * `{ text: canonicalJson(value), sha256: domainHash(domain, that text) }`, from one canonicalization: for a writer
 * that stores a document's text beside its hash (Begin's plan, actor and step requests), which otherwise
 * canonicalized each document twice. The same hash as the document's own function (`manifestHash`, ...).
 */
export function hashedDocument(domain: string, value: unknown): HashedDocument {
  const text = canonicalJson(value);
  return { text, sha256: domainHash(domain, text) };
}

/**
 * A stored document's hash from its stored text, once `parseCanonical(text)` (which requires the RFC 8785 form) has
 * accepted that text: the text then IS the document's canonical form, so this equals the document's own hash
 * (`manifestHash(parsed)`, `stepRequestHash(parsed)`, ...) without canonicalizing the parsed document a second time.
 * Only for text `parseCanonical` checked (never with `requireCanonical: false`).
 */
export function canonicalTextHash(domain: string, canonicalText: string): Sha256Hex {
  return domainHash(domain, canonicalText);
}

/** ManifestHash: the CreationPlan under `kandev/task-creation-plan/v1`. */
export function manifestHash(plan: CreationPlan): Sha256Hex {
  return domainHash(PLAN_DOMAIN, canonicalJson(plan));
}

/** ActorBindingHash: the ActorBindingDocument under `kandev/task-creation-actor/v1`. */
export function actorBindingHash(doc: ActorBindingDocument): Sha256Hex {
  return domainHash(ACTOR_DOMAIN, canonicalJson(doc));
}

/** `request_sha256` of one step's complete request object. */
export function stepRequestHash(request: StepRequest): Sha256Hex {
  return domainHash(STEP_REQUEST_DOMAIN, canonicalJson(request));
}

/** `evidence_sha256` of a StepEvidence envelope. */
export function evidenceHash(evidence: StepEvidence): Sha256Hex {
  return domainHash(STEP_EVIDENCE_DOMAIN, canonicalJson(evidence));
}

/** `CreationPlan.request_sha256`: the validated, normalized create request. */
export function createRequestHash(validatedRequest: unknown): Sha256Hex {
  return domainHash(CREATE_REQUEST_DOMAIN, canonicalJson(validatedRequest));
}

/** `row_sha256` of a row document (plain JSON: timestamps as strings, never Date). */
export function rowHash(rowDocument: unknown): Sha256Hex {
  return domainHash(ROW_DOMAIN, canonicalJson(rowDocument));
}

/** `compensation_evidence_sha256` of a CompensationProof. */
export function compensationProofHash(proof: CompensationProof): Sha256Hex {
  return domainHash(COMPENSATION_DOMAIN, canonicalJson(proof));
}

/** `task_resource_cleanup_jobs.proof_sha256` of a cleanup proof document. */
export function cleanupProofHash(proof: unknown): Sha256Hex {
  return domainHash(CLEANUP_PROOF_DOMAIN, canonicalJson(proof));
}

/** `event_outbox.payload_sha256` of an event payload. */
export function payloadHash(payload: unknown): Sha256Hex {
  return domainHash(OUTBOX_PAYLOAD_DOMAIN, canonicalJson(payload));
}

/** Deterministic step idempotency key (stored in `task_creation_steps.idempotency_key`). */
export function idempotencyKey(
  operationId: string,
  kind: StepKind,
  stepKey: string,
  requestSha256: Sha256Hex,
): Sha256Hex {
  return domainHash(IDEMPOTENCY_DOMAIN, joinNul([operationId, kind, stepKey, requestSha256], 'idempotency_key'));
}

/** Raw 32-byte lock-key digest: SHA-256(ASCII(domain) || 0x00 || parts joined by 0x00). */
export function lockKeyDigest(domain: LockKeyDomain, parts: readonly string[]): Buffer {
  if (!(LOCK_KEY_DOMAINS as readonly string[]).includes(domain)) {
    throw new ValidationError('domain', `unknown lock-key domain "${String(domain)}"`, 'invalid_document');
  }
  if (parts.length === 0) throw new ValidationError('parts', 'a lock key needs at least one part', 'invalid_document');
  return createHash('sha256').update(domainPrefix(domain)).update(joinNul(parts, 'parts')).digest();
}

/** First 8 digest bytes as a signed big-endian int64 (the `pg_advisory_xact_lock` key). */
export function advisoryLockId(digest: Buffer): bigint {
  if (!Buffer.isBuffer(digest) || digest.length !== 32) {
    throw new ValidationError('digest', 'must be a 32-byte SHA-256 digest', 'invalid_document');
  }
  return digest.readBigInt64BE(0);
}
