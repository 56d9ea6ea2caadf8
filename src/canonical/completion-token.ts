/**
 * CompletionToken: the private secret of a CreationHandle.
 *
 * Contract:
 * - A token is 32 bytes from the CSPRNG, carried as unpadded base64url
 *   (exactly 43 characters, canonical encoding). Only the lowercase hex
 *   SHA-256 of the 32 raw bytes is stored (`completion_token_sha256`).
 * - `completionTokenSha256(token)` throws `ValidationError` ('invalid_document')
 *   unless the token is the canonical base64url encoding of exactly 32 bytes.
 * - `completionTokenMatches(token, storedSha256Hex)` compares digests with
 *   `crypto.timingSafeEqual`; it never throws and returns false for any
 *   malformed token or stored hash.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { ValidationError } from '../domain/errors';
import type { Sha256Hex } from './types';

const TOKEN_BYTES = 32;
const TOKEN_PATTERN = /^[A-Za-z0-9_-]{43}$/;
const SHA256_HEX = /^[0-9a-f]{64}$/;

export interface NewCompletionToken {
  /** base64url (no padding) of 32 random bytes; give it to the caller, never store it. */
  token: string;
  /** lowercase hex SHA-256 of the 32 raw bytes; the only stored form. */
  sha256: Sha256Hex;
}

function decodeToken(token: unknown): Buffer | null {
  if (typeof token !== 'string' || !TOKEN_PATTERN.test(token)) return null;
  const raw = Buffer.from(token, 'base64url');
  // Reject non-canonical encodings (non-zero trailing bits) so one secret has one spelling.
  if (raw.length !== TOKEN_BYTES || raw.toString('base64url') !== token) return null;
  return raw;
}

export function newCompletionToken(): NewCompletionToken {
  const raw = randomBytes(TOKEN_BYTES);
  return { token: raw.toString('base64url'), sha256: createHash('sha256').update(raw).digest('hex') };
}

export function completionTokenSha256(token: string): Sha256Hex {
  const raw = decodeToken(token);
  if (raw === null) {
    throw new ValidationError(
      'completion_token',
      'must be the unpadded base64url encoding of exactly 32 bytes',
      'invalid_document',
    );
  }
  return createHash('sha256').update(raw).digest('hex');
}

export function completionTokenMatches(token: string, storedSha256Hex: string): boolean {
  try {
    const raw = decodeToken(token);
    const validStored = typeof storedSha256Hex === 'string' && SHA256_HEX.test(storedSha256Hex);
    // Hash even when malformed so the work done does not depend on which input was bad.
    const actual = createHash('sha256')
      .update(raw ?? Buffer.alloc(TOKEN_BYTES))
      .digest();
    const expected = validStored ? Buffer.from(storedSha256Hex, 'hex') : Buffer.alloc(32);
    const equal = timingSafeEqual(actual, expected);
    return equal && raw !== null && validStored;
  } catch {
    return false;
  }
}
