/**
 * Field-level normalizers shared by create-request validation: pure string
 * checks that throw `ValidationError(<pointer>, ...)` with code
 * `invalid_request`. See `create-request.ts` for the rules they implement.
 */
import { ValidationError } from '../domain/errors';
import { pointer } from './create-request-schema';

export const TITLE_MAX_CHARS = 500;
export const DESCRIPTION_MAX_BYTES = 64 * 1024;
/**
 * 197, not 200: the step key `provider:connection_id:contribution_kind:contribution_id`
 * must fit `task_creation_steps.step_key varchar(255)`, and its longest prefix
 * (`gitlab:<uuid>:merge_request:`) is 58 characters.
 */
export const CONTRIBUTION_ID_MAX_CHARS = 197;

// eslint-disable-next-line no-control-regex
const ASCII_CONTROL = /[\u0000-\u001f\u007f]/;
const LONE_SURROGATE = /[\ud800-\udfff]/u;

export function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

export function sortedUnique(ids: readonly string[]): string[] {
  return [...new Set(ids)].sort(cmp);
}

export function assertWellFormed(value: unknown, at: string): void {
  if (typeof value === 'string') {
    if (LONE_SURROGATE.test(value))
      throw new ValidationError(at || '/', 'must be well-formed Unicode (lone surrogate)');
  } else if (Array.isArray(value)) {
    value.forEach((v, i) => assertWellFormed(v, pointer(at, i)));
  } else if (typeof value === 'object' && value !== null) {
    for (const [k, v] of Object.entries(value)) assertWellFormed(v, pointer(at, k));
  }
}

export function normalizeTitle(raw: string): string {
  const title = raw.trim();
  const chars = [...title].length;
  if (chars === 0) throw new ValidationError('/title', 'must not be empty or only white space');
  if (chars > TITLE_MAX_CHARS)
    throw new ValidationError('/title', `must be at most ${TITLE_MAX_CHARS} characters (got ${chars})`);
  if (ASCII_CONTROL.test(title)) throw new ValidationError('/title', 'must not contain control characters');
  return title;
}

export function normalizeDescription(raw: string | null | undefined): string | null {
  if (raw === undefined || raw === null) return null;
  const bytes = Buffer.byteLength(raw, 'utf8');
  if (bytes > DESCRIPTION_MAX_BYTES) {
    throw new ValidationError('/description', `must be at most ${DESCRIPTION_MAX_BYTES} UTF-8 bytes (got ${bytes})`);
  }
  if (raw.includes('\u0000')) throw new ValidationError('/description', 'must not contain NUL characters');
  return raw;
}

export function normalizeContributionId(raw: string | number, at: string): string {
  if (typeof raw === 'number') {
    if (!Number.isSafeInteger(raw) || raw < 1)
      throw new ValidationError(at, 'must be a positive integer or a non-empty string');
    return String(raw);
  }
  const chars = [...raw].length;
  if (chars === 0) throw new ValidationError(at, 'must not be empty');
  if (chars > CONTRIBUTION_ID_MAX_CHARS) {
    throw new ValidationError(at, `must be at most ${CONTRIBUTION_ID_MAX_CHARS} characters (got ${chars})`);
  }
  if (ASCII_CONTROL.test(raw)) throw new ValidationError(at, 'must not contain control characters');
  if (raw.trim() !== raw) throw new ValidationError(at, 'must not have leading or trailing white space');
  return raw;
}
