/**
 * Git CLI helpers for step effects (`execFile('git', ...)`, no shell, a
 * timeout on every call), run from the process's small helper process
 * (src/launch/spawner.ts: forking a worker's heap for every Git command cost
 * the worker more CPU than Git itself), or in this process with
 * TASKLEDGER_SPAWNER=inline. I/O: never call these inside a SQL transaction.
 *
 * Contract:
 * - `runGit(args, timeoutMs)` resolves to stdout or rejects with `GitCommandError`
 *   (exit code, stderr, `timedOut`). Git runs with `LC_ALL=C` (parseable
 *   messages) and no terminal prompt.
 * - Queries (`isGitRepository`, `commitExists`, `branchCommit`,
 *   `listWorktrees`, `absoluteGitDir`, `headCommit`, `currentBranch`) answer
 *   `false`/`null` for "not there" and reject only when Git itself could not
 *   answer (timeout, crash).
 * - `repositoryPreflight` answers "base commit there? branch there?" for the
 *   hot path of a new worktree: from Git's files when they prove the usual
 *   answer (a loose base commit, no branch; src/git/files.ts), else with one
 *   `cat-file` process.
 * - `isLockContention(err)`: another Git process holds a `.lock` file.
 * - `addWorktree` runs one `git worktree add` per repository at a time within
 *   a process: concurrent adds in one repository make Git read each other's
 *   half-written `.git/worktrees/<name>` (`failed to read ... commondir`), and
 *   the loser leaves its new branch behind. Across processes that can still
 *   happen; `isWorktreeRace` recognises it and `deleteBranchAt` undoes the
 *   branch by compare-and-set.
 */
import { runCommand } from '../launch/shared-spawner';
import type { RunResult } from '../launch/spawner';
import { fileRef, filesRepository, hasLooseObject } from './files';
import { readdir, readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';

export class GitCommandError extends Error {
  constructor(
    message: string,
    readonly args: readonly string[],
    readonly exitCode: number | null,
    readonly stderr: string,
    readonly timedOut: boolean,
  ) {
    super(message);
    this.name = 'GitCommandError';
  }
}

const GIT_ENV = { LC_ALL: 'C', GIT_TERMINAL_PROMPT: '0' };

export async function runGit(args: readonly string[], timeoutMs: number, input?: string): Promise<string> {
  let r: RunResult;
  try {
    r = await runCommand({ file: 'git', args: [...args], env: GIT_ENV, input, timeoutMs, maxBuffer: 16 * 1024 * 1024 });
  } catch (err) {
    // The helper died with the command in flight: Git may or may not have run. No exit status, no timeout.
    throw new GitCommandError(`git ${args.join(' ')} lost: ${(err as Error).message}`, args, null, '', false);
  }
  if (r.exitCode === 0) return r.stdout;
  const timedOut = r.killed || r.signal !== null;
  const detail = r.stderr.trim().split('\n').slice(-3).join(' | ');
  throw new GitCommandError(
    `git ${args.join(' ')} ${timedOut ? 'timed out' : `failed (${r.exitCode ?? r.errorCode ?? 'error'})`}: ${detail}`,
    args,
    r.exitCode,
    r.stderr,
    timedOut,
  );
}

/** Exit status 1/128 of a query means "no"; anything else (timeout, spawn failure) is a real error. */
async function query(args: readonly string[], timeoutMs: number): Promise<string | null> {
  try {
    return await runGit(args, timeoutMs);
  } catch (err) {
    if (err instanceof GitCommandError && !err.timedOut && err.exitCode !== null) return null;
    throw err;
  }
}

const LOCK_PATTERNS = [
  /\.lock': File exists/i,
  /Unable to create '.*\.lock'/i,
  /could not lock/i,
  /another git process/i,
];

export function isLockContention(err: unknown): boolean {
  return err instanceof GitCommandError && LOCK_PATTERNS.some((p) => p.test(err.stderr));
}

/** A directory whose top level is a Git work tree (or bare repository). */
export async function isGitRepository(path: string, timeoutMs: number): Promise<boolean> {
  try {
    const out = await query(['-C', path, 'rev-parse', '--git-dir'], timeoutMs);
    return out !== null && out.trim() !== '';
  } catch (err) {
    // `-C` on a missing directory fails before Git starts: that is "not a repository" too.
    if (err instanceof GitCommandError && !err.timedOut) return false;
    throw err;
  }
}

export interface RepositoryPreflight {
  /** The base commit is in the repository. */
  commit: boolean;
  /** The commit `refs/heads/<branch>` points at, or null when the branch does not exist. */
  branchAt: string | null;
}

/**
 * What a new worktree needs to know before it is made: whether the base commit exists and whether the
 * branch does. The usual answer (the base commit is a loose object, the branch is in neither the loose nor
 * the packed refs) is read from Git's files; any other is one `git cat-file --batch-check`. Null when Git
 * does not answer there (not a repository, a missing directory): the caller then asks `isGitRepository`
 * for the precise reason.
 */
export async function repositoryPreflight(
  repo: string,
  baseCommit: string,
  branch: string,
  timeoutMs: number,
): Promise<RepositoryPreflight | null> {
  const common = filesRepository(repo);
  if (common !== null) {
    const commit = hasLooseObject(common, baseCommit);
    const branchRef = fileRef(common, `refs/heads/${branch}`);
    if (commit && branchRef === 'absent') return { commit: true, branchAt: null };
  }
  let out: string;
  try {
    out = await runGit(
      ['-C', repo, 'cat-file', '--batch-check=%(objectname) %(objecttype)'],
      timeoutMs,
      `${baseCommit}^{commit}\nrefs/heads/${branch}^{commit}\n`,
    );
  } catch (err) {
    if (err instanceof GitCommandError && !err.timedOut) return null;
    throw err;
  }
  const [commitLine = '', branchLine = ''] = out.split('\n');
  const found = (line: string) => (line.endsWith(' commit') ? line.slice(0, -' commit'.length) : null);
  return { commit: found(commitLine) !== null, branchAt: found(branchLine) };
}

export async function commitExists(repo: string, commit: string, timeoutMs: number): Promise<boolean> {
  const out = await query(['-C', repo, 'cat-file', '-e', `${commit}^{commit}`], timeoutMs);
  return out !== null;
}

/** The commit a local branch points at, or null when the branch does not exist. */
export async function branchCommit(repo: string, branch: string, timeoutMs: number): Promise<string | null> {
  const out = await query(['-C', repo, 'rev-parse', '--verify', '--quiet', `refs/heads/${branch}^{commit}`], timeoutMs);
  return out === null ? null : out.trim() || null;
}

export interface WorktreeEntry {
  path: string;
  head: string | null;
  /** Full ref, e.g. `refs/heads/main`; null when detached or bare. */
  branch: string | null;
  prunable: boolean;
}

/** `git worktree list --porcelain`, parsed (the main work tree first). */
export async function listWorktrees(repo: string, timeoutMs: number): Promise<WorktreeEntry[]> {
  let out: string;
  try {
    out = await runGit(['-C', repo, 'worktree', 'list', '--porcelain'], timeoutMs);
  } catch (err) {
    // Another process is half-way through `worktree add`: Git refuses to list; read the admin directories.
    if (!isWorktreeRace(err)) throw err;
    return scanWorktreeAdminDirs(repo, timeoutMs);
  }
  const entries: WorktreeEntry[] = [];
  let cur: WorktreeEntry | null = null;
  for (const line of out.split('\n')) {
    if (line.startsWith('worktree ')) {
      cur = { path: line.slice('worktree '.length), head: null, branch: null, prunable: false };
      entries.push(cur);
    } else if (cur && line.startsWith('HEAD ')) {
      cur.head = line.slice(5);
    } else if (cur && line.startsWith('branch ')) {
      cur.branch = line.slice(7);
    } else if (cur && line.startsWith('prunable')) {
      cur.prunable = true;
    }
  }
  return entries;
}

async function addWorktreeNow(
  repo: string,
  path: string,
  branch: string,
  baseCommit: string,
  timeoutMs: number,
): Promise<void> {
  await runGit(['-C', repo, 'worktree', 'add', '--quiet', '-b', branch, path, baseCommit], timeoutMs);
}

/**
 * The linked worktrees as their administrative directories record them
 * (`<common dir>/worktrees/<name>/{gitdir,HEAD}`), skipping one still being
 * written. What `worktree list` reports for linked worktrees, without the
 * main work tree or the prunable flag; used only while Git refuses to list.
 */
async function scanWorktreeAdminDirs(repo: string, timeoutMs: number): Promise<WorktreeEntry[]> {
  const common = (
    await runGit(['-C', repo, 'rev-parse', '--path-format=absolute', '--git-common-dir'], timeoutMs)
  ).trim();
  const entries: WorktreeEntry[] = [];
  const names = await readdir(join(common, 'worktrees')).catch(() => [] as string[]);
  for (const name of names.sort()) {
    const dir = join(common, 'worktrees', name);
    const gitdir = (await readFile(join(dir, 'gitdir'), 'utf8').catch(() => '')).trim();
    const head = (await readFile(join(dir, 'HEAD'), 'utf8').catch(() => '')).trim();
    if (gitdir === '' || head === '') continue;
    const branch = head.startsWith('ref: ') ? head.slice('ref: '.length) : null;
    entries.push({ path: dirname(gitdir), head: branch === null ? head : null, branch, prunable: false });
  }
  return entries;
}

/** Per repository path: the tail of the chain of `worktree add` calls in this process. */
const addChains = new Map<string, Promise<unknown>>();

export function addWorktree(...args: Parameters<typeof addWorktreeNow>): Promise<void> {
  const repo = args[0];
  const prev = addChains.get(repo) ?? Promise.resolve();
  const run = prev.catch(() => undefined).then(() => addWorktreeNow(...args));
  const tail = run.catch(() => undefined);
  addChains.set(repo, tail);
  void tail.then(() => {
    if (addChains.get(repo) === tail) addChains.delete(repo);
  });
  return run;
}

/** Git lost a race with another `worktree add` in the same repository (another process's half-made worktree). */
export function isWorktreeRace(err: unknown): boolean {
  return (
    err instanceof GitCommandError && /failed to read \.git\/worktrees\/[^ ]*\/(commondir|gitdir)/.test(err.stderr)
  );
}

/** Deletes `refs/heads/<branch>` only while it still points at `commit` (compare-and-set). */
export async function deleteBranchAt(repo: string, branch: string, commit: string, timeoutMs: number): Promise<void> {
  await runGit(['-C', repo, 'update-ref', '-d', `refs/heads/${branch}`, commit], timeoutMs);
}

/** The worktree's own administrative directory (`<repo>/.git/worktrees/<name>`), or null. */
export async function absoluteGitDir(path: string, timeoutMs: number): Promise<string | null> {
  const out = await query(['-C', path, 'rev-parse', '--absolute-git-dir'], timeoutMs).catch((err: unknown) => {
    if (err instanceof GitCommandError && !err.timedOut) return null;
    throw err;
  });
  return out === null ? null : out.trim() || null;
}

export async function headCommit(path: string, timeoutMs: number): Promise<string | null> {
  const out = await query(['-C', path, 'rev-parse', '--verify', '--quiet', 'HEAD^{commit}'], timeoutMs);
  return out === null ? null : out.trim() || null;
}

/** The checked-out branch's full ref, or null when HEAD is detached. */
export async function currentBranch(path: string, timeoutMs: number): Promise<string | null> {
  const out = await query(['-C', path, 'symbolic-ref', '--quiet', 'HEAD'], timeoutMs);
  return out === null ? null : out.trim() || null;
}
