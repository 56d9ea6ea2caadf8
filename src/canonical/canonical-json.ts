/**
 * RFC 8785 (JSON Canonicalization Scheme) bytes for the protocol's documents.
 *
 * Contract:
 * - `canonicalJson(value)` returns the RFC 8785 text of a plain JSON value
 *   (null, boolean, finite number, string without lone surrogates, dense array,
 *   object whose prototype is `Object.prototype` or `null`). Anything else
 *   (undefined anywhere, functions, symbols, bigint, NaN/Infinity, Date, Buffer,
 *   Map, class instances, sparse arrays, cycles) throws
 *   `ValidationError(<JSON pointer>, ..., 'invalid_document')`; nothing is
 *   silently dropped or coerced through `toJSON`.
 * - `canonicalBytes(value)` is the UTF-8 encoding of that text.
 * - `sameJson(a, b)` answers `canonicalJson(a) === canonicalJson(b)` (and
 *   throws as it would) without building the texts.
 * - `parseCanonical(text)` parses JSON text read back from a database column
 *   and, unless `{ requireCanonical: false }`, asserts the text is byte-equal to
 *   its own canonical form (so duplicate keys, whitespace or reordered keys are
 *   rejected). Callers still re-canonicalize before hashing: never hash what
 *   the database returned. A text proved canonical once is remembered as
 *   such (a bounded set of texts); each call still parses and returns a fresh
 *   value.
 */
import canonicalize from 'canonicalize';
import { ValidationError } from '../domain/errors';

/** Appends one reference token to a JSON pointer (RFC 6901 escaping). */
export function jsonPointer(parent: string, token: string | number): string {
  return `${parent}/${String(token).replace(/~/g, '~0').replace(/\//g, '~1')}`;
}

function invalid(field: string, message: string): ValidationError {
  return new ValidationError(field, message, 'invalid_document');
}

/**
 * True when `s` holds a UTF-16 surrogate without its pair. Node 20's native `String.prototype.isWellFormed`
 * (ES2024) answers it without a per-character loop in JavaScript.
 */
function hasLoneSurrogate(s: string): boolean {
  return !(s as string & { isWellFormed(): boolean }).isWellFormed();
}

function describe(value: unknown): string {
  if (value === undefined) return 'undefined';
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'symbol') return 'a symbol';
  if (typeof value === 'bigint') return 'a bigint';
  if (typeof value === 'object' && value !== null) {
    const name = value.constructor?.name;
    return name ? `a ${name} instance` : 'a non-plain object';
  }
  return typeof value;
}

/** The JSON pointer of a path held as reference tokens (built only for an error message). */
function pointerOf(tokens: readonly (string | number)[]): string {
  return tokens.reduce<string>((p, t) => jsonPointer(p, t), '');
}

/** Throws unless `value` is a plain JSON value (see the file contract). */
export function assertPlainJson(value: unknown): void {
  checkPlain(value, [], []);
}

/**
 * The walk behind `assertPlainJson`. The path is kept as tokens and turned into a pointer only when an error names
 * it: building a pointer string for every member of every document was a tenth of the canonicalization's cost.
 */
function checkPlain(value: unknown, path: (string | number)[], ancestors: object[]): void {
  switch (typeof value) {
    case 'string':
      if (hasLoneSurrogate(value)) throw invalid(pointerOf(path), 'string contains a lone UTF-16 surrogate');
      return;
    case 'boolean':
      return;
    case 'number':
      if (!Number.isFinite(value)) throw invalid(pointerOf(path), `number ${String(value)} is not valid JSON`);
      return;
    case 'object':
      break;
    default:
      throw invalid(pointerOf(path), `${describe(value)} is not a JSON value`);
  }
  if (value === null) return;
  if (ancestors.includes(value)) throw invalid(pointerOf(path), 'circular reference');
  ancestors.push(value);
  try {
    if (Array.isArray(value)) {
      if (Object.getPrototypeOf(value) !== Array.prototype)
        throw invalid(pointerOf(path), `${describe(value)} is not a JSON value`);
      for (let i = 0; i < value.length; i++) {
        path.push(i);
        if (!(i in value)) throw invalid(pointerOf(path), 'sparse array hole is not a JSON value');
        checkPlain(value[i], path, ancestors);
        path.pop();
      }
      return;
    }
    const proto: unknown = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null)
      throw invalid(pointerOf(path), `${describe(value)} is not a JSON value`);
    if (Object.getOwnPropertySymbols(value).length > 0)
      throw invalid(pointerOf(path), 'symbol-keyed property is not JSON');
    for (const key of Object.keys(value)) {
      path.push(key);
      if (hasLoneSurrogate(key)) throw invalid(pointerOf(path), 'key contains a lone UTF-16 surrogate');
      checkPlain((value as Record<string, unknown>)[key], path, ancestors);
      path.pop();
    }
  } finally {
    ancestors.pop();
  }
}

/** RFC 8785 canonical JSON text of a plain JSON value. */
export function canonicalJson(value: unknown): string {
  assertPlainJson(value);
  const text = canonicalize(value);
  if (typeof text !== 'string') throw invalid('', 'value has no JSON representation');
  return text;
}

/**
 * `canonicalJson(a) === canonicalJson(b)` without building either text: both are checked as plain JSON (and throw
 * as `canonicalJson` would), then compared member by member. For plain JSON values the two answers are the same:
 * RFC 8785 orders keys itself, a finite number's text is a function of its value alone (0 and -0 both print `0`, and
 * `0 === -0`), and distinct strings escape to distinct texts. Comparing documents this way, not by their texts or
 * their hashes, saves two canonicalizations (and two SHA-256 runs for row documents) per comparison.
 */
export function sameJson(a: unknown, b: unknown): boolean {
  assertPlainJson(a);
  assertPlainJson(b);
  return plainEqual(a, b);
}

/** Structural equality of two values already checked to be plain JSON. */
function plainEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!plainEqual(a[i], b[i])) return false;
    return true;
  }
  if (Array.isArray(b)) return false;
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  for (const key of keys) {
    if (!Object.prototype.hasOwnProperty.call(b, key)) return false;
    if (!plainEqual((a as Record<string, unknown>)[key], (b as Record<string, unknown>)[key])) return false;
  }
  return true;
}

/** UTF-8 bytes of `canonicalJson(value)`. */
export function canonicalBytes(value: unknown): Buffer {
  return Buffer.from(canonicalJson(value), 'utf8');
}

export interface ParseCanonicalOptions {
  /** Assert `text` is exactly its own RFC 8785 form (default true). */
  requireCanonical?: boolean;
}

/** Parses stored canonical JSON text; see the file contract. */
export function parseCanonical(text: string, options: ParseCanonicalOptions = {}): unknown {
  if (typeof text !== 'string') throw invalid('', `expected JSON text, got ${describe(text)}`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text) as unknown;
  } catch (err) {
    throw invalid('', `not valid JSON text (${(err as Error).message})`);
  }
  if ((options.requireCanonical ?? true) && !knownCanonical.has(text)) {
    if (canonicalJson(parsed) !== text) throw invalid('', 'JSON text is not in RFC 8785 canonical form');
    if (knownCanonical.size >= KNOWN_CANONICAL_MAX) knownCanonical.clear();
    knownCanonical.add(text);
  }
  return parsed;
}

/**
 * Texts this process already proved canonical. Whether a text is its own RFC 8785 form depends on the text alone, so
 * the verdict is remembered: a worker reads the same stored documents (a step's request, its evidence) at the claim,
 * in Complete's phase A and again in phase B, and re-canonicalizing each was most of `parseCanonical`'s cost. The
 * parse itself is not remembered: every caller gets a fresh value it may keep. Bounded; emptied when full.
 */
const knownCanonical = new Set<string>();
const KNOWN_CANONICAL_MAX = 4096;
