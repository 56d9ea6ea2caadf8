/**
 * `taskledger migrate` as an operator runs it: the real bin/taskledger.mjs in a
 * child process, against a scratch database on this project's server (the
 * project's own test database stays untouched). Runs once per dialect.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ALL_MIGRATIONS } from '../../migrations/index';
import { ensureDatabase } from '../../src/db/admin';
import { main } from '../../src/cli/main';
import { dbConfigFromEnv } from '../../src/db/config';
import { dropDatabase, siblingDatabaseUrl } from './scratch-db';

const BIN = fileURLToPath(new URL('../../bin/taskledger.mjs', import.meta.url));
const { url: projectUrl, dialect } = dbConfigFromEnv();
const scratchUrl = siblingDatabaseUrl(projectUrl, '_cli');
const scratchName = new URL(scratchUrl).pathname.slice(1);
const MIGRATION_NAMES = ALL_MIGRATIONS.map((M) => {
  const m = new M();
  return m.name ?? m.constructor.name;
});

interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

function runCli(args: string[], dbUrl = scratchUrl): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      env: { ...process.env, TASKLEDGER_DB_URL: dbUrl },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

function lastLine(text: string): string {
  return text.trimEnd().split('\n').at(-1) ?? '';
}

describe(`taskledger migrate (${dialect})`, () => {
  beforeAll(async () => {
    await dropDatabase(scratchUrl);
  });
  afterAll(async () => {
    await dropDatabase(scratchUrl);
  });

  it('refuses a missing database without --create, and says how to create it', async () => {
    const res = await runCli(['migrate']);
    expect(res.code).toBe(1);
    expect(res.stderr).toContain(scratchName);
    expect(res.stderr).toContain('--create');
  });

  it('--create creates the database and applies every migration in order', async () => {
    const res = await runCli(['migrate', '--create']);
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    const applied = res.stdout
      .split('\n')
      .filter((l) => l.startsWith('applied '))
      .map((l) => l.slice('applied '.length).trim());
    expect(applied).toEqual(MIGRATION_NAMES);
    expect(lastLine(res.stdout)).toBe(`migrations: ${MIGRATION_NAMES.length} applied, 0 pending (${dialect})`);
  });

  it('a second run applies nothing', async () => {
    const res = await runCli(['migrate', '--create']);
    expect(res.code).toBe(0);
    expect(res.stdout.trim()).toBe(`migrations: 0 applied, 0 pending (${dialect})`);
  });

  it('--status lists every migration as applied', async () => {
    const res = await runCli(['migrate', '--status']);
    expect(res.code).toBe(0);
    for (const name of MIGRATION_NAMES) expect(res.stdout).toContain(`applied  ${name}`);
    expect(res.stdout).not.toContain('pending  ');
    expect(lastLine(res.stdout)).toBe(`migrations: ${MIGRATION_NAMES.length} applied, 0 pending (${dialect})`);
  });

  it('--status on an empty database lists every migration as pending and changes nothing', async () => {
    await dropDatabase(scratchUrl);
    await ensureDatabase(scratchUrl);
    const before = await runCli(['migrate', '--status']);
    expect(before.code).toBe(0);
    for (const name of MIGRATION_NAMES) expect(before.stdout).toContain(`pending  ${name}`);
    expect(lastLine(before.stdout)).toBe(`migrations: 0 applied, ${MIGRATION_NAMES.length} pending (${dialect})`);
    const again = await runCli(['migrate', '--status']);
    expect(again.stdout).toBe(before.stdout);
  });

  it('an unreachable server exits 1 with one line that names the URL without its password (migrate, ops, verify)', async () => {
    const bad = new URL(projectUrl);
    bad.password = 's3cret';
    bad.port = '1';
    bad.pathname = '/x';
    // The read-only operator commands answer the same way.
    for (const args of [['migrate'], ['migrate', '--create'], ['ops', 'list'], ['verify']]) {
      const res = await runCli(args, bad.toString());
      expect(res.code).toBe(1);
      expect(res.stdout).toBe('');
      expect(res.stderr.trim().split('\n')).toHaveLength(1);
      expect(res.stderr).toContain('127.0.0.1:1/x');
      expect(res.stderr).toContain(':***@');
      expect(res.stderr).not.toContain('s3cret');
    }
  });

  it('rejects an unknown option with usage and exit 2', async () => {
    const res = await runMain(['migrate', '--frobnicate']);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain('usage: taskledger migrate');
  });
});

/** Runs the dispatcher in this process (no child: these paths touch no database) and captures its output. */
async function runMain(args: string[]): Promise<CliResult> {
  const out = vi.spyOn(console, 'log').mockImplementation(() => undefined);
  const err = vi.spyOn(console, 'error').mockImplementation(() => undefined);
  try {
    const code = await main(['node', 'taskledger', ...args]);
    const text = (spy: typeof out) => spy.mock.calls.map((c) => c.join(' ') + '\n').join('');
    return { code, stdout: text(out), stderr: text(err) };
  } finally {
    out.mockRestore();
    err.mockRestore();
  }
}

describe('taskledger command dispatch', () => {
  it('an unknown command prints usage and exits 2 (through bin/taskledger.mjs)', async () => {
    const res = await runCli(['frobnicate']);
    expect(res.code).toBe(2);
    expect(res.stdout).toBe('');
    expect(res.stderr).toContain('unknown command "frobnicate"');
    expect(res.stderr).toContain('usage: taskledger <command>');
  });

  it('help and --help list every public command and exit 0', async () => {
    const res = await runMain(['help']);
    expect(res.code).toBe(0);
    for (const name of ['migrate', 'start', 'demo', 'ops list', 'ops show', 'verify', 'bench']) {
      expect(res.stdout).toContain(`taskledger ${name}`);
    }
    expect(await runMain(['--help'])).toEqual(res);
  });

  it('start refuses an unknown role with exit 2 before connecting to anything', async () => {
    const res = await runMain(['start', '--roles', 'steps,frobnicate']);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain('unknown role "frobnicate"');
  });

  it('no command prints usage and exits 2', async () => {
    const res = await runMain([]);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain('usage: taskledger <command>');
  });

  it('verify refuses an unknown option and a malformed workspace id with exit 2, before connecting', async () => {
    const unknown = await runMain(['verify', '--roles', 'api']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("Unknown option '--roles'");
    expect(unknown.stderr).toContain('usage: taskledger verify');
    const badId = await runMain(['verify', '--workspace', 'acme']);
    expect(badId.code).toBe(2);
    expect(badId.stderr).toContain('--workspace must be a workspace id (a UUID), got "acme"');
  });
});
