/**
 * What the CLI prints about a database URL never contains its password.
 */
import { describe, expect, it } from 'vitest';
import { redactUrl, scrubPassword } from '../../src/cli/redact';

describe('redactUrl', () => {
  it.each([
    ['postgres://app:s3cret@db:5432/x', 'postgres://app:***@db:5432/x'],
    ['mysql://root:p%40ss:word@127.0.0.1:3306/t?ssl=1', 'mysql://root:***@127.0.0.1:3306/t?ssl=1'],
    ['mariadb://:only@host/x', 'mariadb://:***@host/x'],
    ['postgres://postgres@127.0.0.1:5432/taskledger', 'postgres://postgres@127.0.0.1:5432/taskledger'],
    ['postgres://host/db@x', 'postgres://host/db@x'],
    ['not a url', 'not a url'],
  ])('%s -> %s', (url, shown) => {
    expect(redactUrl(url)).toBe(shown);
  });
});

describe('scrubPassword', () => {
  it('removes the raw and the percent-decoded password from a driver message', () => {
    const url = 'mysql://root:p%40ss@127.0.0.1:1/x';
    expect(scrubPassword('bad login p%40ss / p@ss', url)).toBe('bad login *** / ***');
  });

  it('leaves messages alone when the URL has no password', () => {
    expect(scrubPassword('connect ECONNREFUSED', 'postgres://postgres@127.0.0.1:1/x')).toBe('connect ECONNREFUSED');
  });
});
