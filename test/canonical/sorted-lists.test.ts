import { describe, expect, it } from 'vitest';
import { derivedStepKey } from '../../src/canonical/plan-invariants';
import { assertSortedUnique, compareCanonicalKeys, sortCanonical } from '../../src/canonical/sorted-lists';
import { expectInvalid } from './expect-invalid';
import * as F from './fixtures';

describe('canonical list order', () => {
  it('compares tuple keys element by element, by UTF-16 code units, shorter prefix first', () => {
    expect(compareCanonicalKeys(['a', 'b'], ['a', 'c'])).toBeLessThan(0);
    expect(compareCanonicalKeys(['b'], ['a', 'z'])).toBeGreaterThan(0);
    expect(compareCanonicalKeys(['a'], ['a', ''])).toBeLessThan(0);
    expect(compareCanonicalKeys(['x', 'y'], ['x', 'y'])).toBe(0);
    expect(compareCanonicalKeys(['Z'], ['a'])).toBeLessThan(0);
    // U+1F600 is encoded D83D DE00, below U+FB33 in UTF-16 (though above it as a code point).
    expect(compareCanonicalKeys(['\ud83d\ude00'], ['\ufb33'])).toBeLessThan(0);
  });

  it('sortCanonical sorts a copy into the order assertSortedUnique accepts', () => {
    const rows = [
      { table: 'tasks', key: 'b' },
      { table: 'task_identities', key: 'z' },
      { table: 'tasks', key: 'a' },
    ];
    const sorted = sortCanonical(rows, (r) => [r.table, r.key]);
    expect(sorted.map((r) => `${r.table}:${r.key}`)).toEqual(['task_identities:z', 'tasks:a', 'tasks:b']);
    expect(rows[0]?.key).toBe('b');
    expect(() => assertSortedUnique(sorted, (r) => [r.table, r.key], '/rows', '(table, key)')).not.toThrow();
    expectInvalid(
      () => assertSortedUnique(rows, (r) => [r.table, r.key], '/rows', '(table, key)'),
      '/rows/1',
      /sorted/,
    );
    expectInvalid(() => assertSortedUnique(['a', 'a'], (s) => [s], '/ids', 'ID'), '/ids/1', /duplicate entry/);
  });
});

describe('derivedStepKey', () => {
  it('derives the canonical key of request-keyed kinds and leaves hash-keyed kinds to the builder', () => {
    expect(derivedStepKey('fresh_branch_prepare', F.request('fresh_branch_prepare'))).toBe(F.ID.envRepo);
    expect(derivedStepKey('remote_contribution_associate', F.request('remote_contribution_associate'))).toBe(
      `github:${F.ID.connection}:pull_request:42`,
    );
    expect(derivedStepKey('session_prepare', F.request('session_prepare'))).toBe(F.ID.session);
    expect(derivedStepKey('launch_intent', F.request('launch_intent'))).toBe(F.ID.session);
    expect(derivedStepKey('workspace_attachment', F.request('workspace_attachment'))).toBeNull();
    expect(derivedStepKey('attachment_claim', F.request('attachment_claim'))).toBeNull();
  });
});
