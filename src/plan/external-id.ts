/**
 * External task ID normalization (companion-notes §2), as one pure function.
 *
 * Contract of `normalizeExternalId(raw)`, applied in exactly this order:
 *   1. `undefined` or `null` → `null` (absent). Any other non-string → error.
 *   2. Any ASCII control character (U+0000–U+001F, U+007F) anywhere in the raw
 *      value → error. This runs BEFORE trimming, so `"\tabc"` or `"abc\n"` are
 *      rejected rather than silently trimmed into a valid ID.
 *   2b. A lone UTF-16 surrogate → error: such a string has no UTF-8 encoding,
 *      so its byte length (and the stored value) would be undefined.
 *   3. Trim leading/trailing Unicode white space. We use
 *      `String.prototype.trim`, whose set (WhiteSpace + LineTerminator of
 *      ECMA-262: U+0009–U+000D, U+0020, U+00A0, U+1680, U+2000–U+200A,
 *      U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF) is an acceptable
 *      reading of "Unicode white space"; the ASCII members of it are already
 *      refused by step 2.
 *   4. Empty after trimming → `null` (absent, not an error).
 *   5. More than 255 UTF-8 bytes → error (255 bytes is accepted).
 * Case and inner white space are preserved: matching is byte-exact.
 * Every error is `ValidationError('/external_id', ..., 'invalid_external_id')`.
 */
import { ValidationError } from '../domain/errors';

/** Maximum length of a normalized external ID, in UTF-8 bytes. */
export const EXTERNAL_ID_MAX_BYTES = 255;

// eslint-disable-next-line no-control-regex
const ASCII_CONTROL = /[\u0000-\u001f\u007f]/;

/** With the `u` flag a surrogate class only matches unpaired surrogates. */
const LONE_SURROGATE = /[\ud800-\udfff]/u;

function invalid(message: string): ValidationError {
  return new ValidationError('/external_id', message, 'invalid_external_id');
}

/** Validates and normalizes a raw external ID; `null` means "no external ID". */
export function normalizeExternalId(raw: unknown): string | null {
  if (raw === undefined || raw === null) return null;
  if (typeof raw !== 'string')
    throw invalid(`external_id must be a string, got ${Array.isArray(raw) ? 'array' : typeof raw}`);
  const control = ASCII_CONTROL.exec(raw);
  if (control) {
    const code = control[0].charCodeAt(0).toString(16).padStart(4, '0').toUpperCase();
    throw invalid(`external_id must not contain ASCII control characters (found U+${code} at index ${control.index})`);
  }
  if (LONE_SURROGATE.test(raw)) throw invalid('external_id must be well-formed Unicode (it contains a lone surrogate)');
  const trimmed = raw.trim();
  if (trimmed === '') return null;
  const bytes = Buffer.byteLength(trimmed, 'utf8');
  if (bytes > EXTERNAL_ID_MAX_BYTES) {
    throw invalid(`external_id must be at most ${EXTERNAL_ID_MAX_BYTES} UTF-8 bytes after trimming (got ${bytes})`);
  }
  return trimmed;
}
