import { describe, expect, it } from 'vitest';
import { ValidationError } from '../../src/domain/errors';
import { normalizeExternalId } from '../../src/plan/external-id';
import { catchError } from './fixtures';

function rejects(raw: unknown, messagePart: RegExp): void {
  const err = catchError(() => normalizeExternalId(raw));
  expect(err).toBeInstanceOf(ValidationError);
  expect(err.code).toBe('invalid_external_id');
  expect(err.field).toBe('/external_id');
  expect(err.message).toMatch(messagePart);
}

describe('normalizeExternalId', () => {
  it('treats undefined and null as absent', () => {
    expect(normalizeExternalId(undefined)).toBeNull();
    expect(normalizeExternalId(null)).toBeNull();
  });

  it.each([
    ['NUL', 'abc\u0000def'],
    ['leading tab (would be trimmed)', '\tabc'],
    ['trailing newline (would be trimmed)', 'abc\n'],
    ['carriage return', 'ab\rc'],
    ['unit separator U+001F', 'ab\u001fc'],
    ['DEL U+007F', 'abc\u007f'],
    ['only control characters', '\t\n'],
  ])('rejects an ASCII control character before trimming: %s', (_name, raw) => {
    rejects(raw, /control character/);
  });

  it('names the offending code point', () => {
    expect(catchError(() => normalizeExternalId('x\u007f')).message).toContain('U+007F');
  });

  it('trims leading and trailing spaces and Unicode white space', () => {
    expect(normalizeExternalId('  ticket-42  ')).toBe('ticket-42');
    expect(normalizeExternalId('\u00a0\u3000ticket-42\u2003')).toBe('ticket-42');
  });

  it('keeps inner white space', () => {
    expect(normalizeExternalId(' a  b ')).toBe('a  b');
  });

  it('treats empty and white-space-only values as absent, not as errors', () => {
    expect(normalizeExternalId('')).toBeNull();
    expect(normalizeExternalId('   ')).toBeNull();
    expect(normalizeExternalId('\u00a0\u2028')).toBeNull();
  });

  it('accepts exactly 255 UTF-8 bytes and rejects 256', () => {
    expect(normalizeExternalId('x'.repeat(255))).toBe('x'.repeat(255));
    rejects('x'.repeat(256), /at most 255 UTF-8 bytes.*got 256/);
  });

  it('counts bytes, not characters, at the boundary', () => {
    const e254 = 'é'.repeat(127); // 2 bytes each
    expect(Buffer.byteLength(e254)).toBe(254);
    expect(normalizeExternalId(`${e254}a`)).toBe(`${e254}a`);
    rejects(`${e254}aa`, /got 256/);
    // 128 × 'é' is only 128 characters but 256 bytes.
    rejects('é'.repeat(128), /got 256/);
    // A 4-byte character straddling the limit.
    expect(normalizeExternalId(`${'x'.repeat(251)}😀`)).toHaveLength(253);
    rejects(`${'x'.repeat(252)}😀`, /got 256/);
  });

  it('measures the length after trimming', () => {
    expect(normalizeExternalId(`  ${'x'.repeat(255)}  `)).toBe('x'.repeat(255));
  });

  it('preserves case', () => {
    expect(normalizeExternalId('ABC')).toBe('ABC');
    expect(normalizeExternalId('ABC')).not.toBe(normalizeExternalId('abc'));
  });

  it.each([
    ['number', 42],
    ['boolean', true],
    ['array', ['a']],
    ['object', { id: 'a' }],
  ])('rejects a non-string: %s', (_name, raw) => {
    rejects(raw, /must be a string/);
  });

  it('rejects a lone surrogate (no UTF-8 encoding)', () => {
    rejects('ab\ud800', /well-formed/);
  });
});
