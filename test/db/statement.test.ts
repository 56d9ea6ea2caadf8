/**
 * PostgreSQL literals (src/db/statement.ts): `pgStringLiteral` writes exactly
 * the driver's `escapeLiteral` text for any string, `pgLiteralList` exactly
 * the list the placeholder route wrote, and a batch carries strings the
 * escaping must get right (quotes, backslashes, `E'...'`-looking text, NUL-free
 * control characters, astral characters) to the server and back unchanged, on
 * both dialects (MariaDB's values travel through mysql2's own escaping).
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { readRows, runTransaction } from '../../src/db/tx';
import { inlinePgParams, pgLiteralList, pgStringLiteral, type SqlParam } from '../../src/db/statement';
import { useTestDb } from '../support/db';

const t = useTestDb(1);

const ADVERSARIAL = [
  '',
  "'",
  "''",
  '\\',
  "\\'",
  "'\\",
  "it's",
  'back\\slash \\x41',
  "E'\\\\'",
  " E'x'",
  "'); DROP TABLE workspaces; --",
  'a ? b $1 c',
  'line\nbreak\r\ttab',
  'ünïcødé ✓ 漢字 😀',
  '\u0001\u001f\u007f',
  '{"k":"v\\"q","n":[1,2]}',
];

/** Strings drawn from an alphabet rich in the characters escaping cares about. */
function randomStrings(n: number, seed: number): string[] {
  const alphabet = ["'", '\\', '"', 'a', 'Z', '0', ' ', '\n', '?', '$', 'E', 'é', '😀', '\u0001', '%', '_'];
  // mulberry32: seeded, so a failure names a reproducible case.
  let x = seed;
  const next = () => {
    x = (x + 0x6d2b79f5) | 0;
    let r = Math.imul(x ^ (x >>> 15), 1 | x);
    r = (r + Math.imul(r ^ (r >>> 7), 61 | r)) ^ r;
    return (r ^ (r >>> 14)) >>> 0;
  };
  return Array.from({ length: n }, () =>
    Array.from({ length: next() % 24 }, () => alphabet[next() % alphabet.length]).join(''),
  );
}

describe('PostgreSQL literals', () => {
  it('a string literal is the driver escapeLiteral text, character for character', () => {
    const cases = [...ADVERSARIAL, ...randomStrings(2000, 7)];
    let withBackslash = 0;
    for (const s of cases) {
      expect(pgStringLiteral(s), JSON.stringify(s)).toBe(pg.escapeLiteral(s));
      if (s.includes('\\')) withBackslash++;
    }
    // The cases exercise both forms the driver writes.
    expect(withBackslash).toBeGreaterThan(100);
    expect(cases.length - withBackslash).toBeGreaterThan(100);
  });

  it('a literal list is what the placeholder route wrote for the same values', () => {
    const values: SqlParam[] = [null, 0, -1.5, 42n, true, false, "it's", 'a\\b', '', randomUUID()];
    expect(pgLiteralList([])).toBe('');
    for (let n = 1; n <= values.length; n++) {
      const params = values.slice(0, n);
      const placeholders = `(${params.map(() => '?').join(', ')})`;
      expect(pgLiteralList(params)).toBe(inlinePgParams(placeholders, params));
    }
    expect(() => pgLiteralList([new Date()])).toThrow(TypeError);
    expect(() => pgLiteralList([Number.NaN])).toThrow(TypeError);
  });

  it('strings written by a batch read back unchanged', async () => {
    const names = [...ADVERSARIAL.filter((s) => s !== ''), ...randomStrings(40, 11).filter((s) => s !== '')];
    const ids = names.map(() => randomUUID());
    // Twice per text: the second run of each INSERT travels as an EXECUTE of a prepared statement.
    for (let round = 0; round < 2; round++) {
      await runTransaction(t.db, 'LiteralsWrite', async (tx) => {
        await Promise.all(
          names.map((name, i) =>
            tx.exec(
              `INSERT INTO workspaces (id, name, state, created_at, updated_at) VALUES (?, ?, 'active', ${tx.now}, ${tx.now})`,
              [round === 0 ? ids[i]! : randomUUID(), name],
            ),
          ),
        );
      });
    }
    const rows = await readRows<{ id: string; name: string }>(
      t.db,
      `SELECT id, name FROM workspaces WHERE id IN (${ids.map(() => '?').join(', ')})`,
      ids,
    );
    const byId = new Map(rows.map((r) => [r.id, r.name]));
    expect(ids.map((id) => byId.get(id))).toEqual(names);
  });
});
