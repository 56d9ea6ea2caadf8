import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  completionTokenMatches,
  completionTokenSha256,
  newCompletionToken,
} from '../../src/canonical/completion-token';
import { expectInvalid } from './expect-invalid';

describe('completion tokens', () => {
  it('are 32 random bytes as unpadded base64url, stored only as SHA-256 of the raw bytes', () => {
    const { token, sha256 } = newCompletionToken();
    expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const raw = Buffer.from(token, 'base64url');
    expect(raw.length).toBe(32);
    expect(sha256).toBe(createHash('sha256').update(raw).digest('hex'));
    expect(sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(newCompletionToken().token).not.toBe(token);
  });

  it('round-trip: the hash of a token matches, and the token matches its stored hash', () => {
    const { token, sha256 } = newCompletionToken();
    expect(completionTokenSha256(token)).toBe(sha256);
    expect(completionTokenMatches(token, sha256)).toBe(true);
  });

  it('a known token has a known hash', () => {
    const token = Buffer.alloc(32, 0).toString('base64url');
    expect(token).toBe('AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA');
    // SHA-256 of 32 zero bytes.
    expect(completionTokenSha256(token)).toBe('66687aadf862bd776c8fc18b8e9f8e20089714856ee233b3902a591d0d5f2925');
  });

  it('does not match another token or another hash', () => {
    const a = newCompletionToken();
    const b = newCompletionToken();
    expect(completionTokenMatches(a.token, b.sha256)).toBe(false);
    expect(completionTokenMatches(b.token, a.sha256)).toBe(false);
    // A hash of the token text (not of the raw bytes) is not the stored form.
    expect(completionTokenMatches(a.token, createHash('sha256').update(a.token).digest('hex'))).toBe(false);
  });

  it('returns false, never throws, for malformed tokens or stored hashes', () => {
    const { token, sha256 } = newCompletionToken();
    const malformed: unknown[] = [
      '',
      token.slice(0, 42),
      `${token}A`,
      `${token}=`,
      token.replace(/^./, '+'),
      Buffer.alloc(32).toString('base64'),
      Buffer.alloc(31).toString('base64url'),
      'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB', // non-canonical: trailing bits set
      null,
      undefined,
      42,
      { token },
    ];
    for (const bad of malformed) expect(completionTokenMatches(bad as string, sha256)).toBe(false);
    for (const badHash of ['', sha256.toUpperCase(), sha256.slice(1), `${sha256}00`, 'zz'.repeat(32), null]) {
      expect(completionTokenMatches(token, badHash as string)).toBe(false);
    }
  });

  it('completionTokenSha256 rejects anything but a canonical 32-byte base64url token', () => {
    expectInvalid(() => completionTokenSha256('short'), 'completion_token', /32 bytes/);
    expectInvalid(() => completionTokenSha256('AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB'), 'completion_token');
    expectInvalid(() => completionTokenSha256(`${newCompletionToken().token}=`), 'completion_token');
  });
});
