/**
 * Git CLI helpers for step effects (`execFile('git', ...)`, no shell, a
 * timeout on every call). I/O: never call these inside a SQL transaction.
 *
 * Contract:
 * - `runGit(args, timeoutMs)` resolves to stdout or rejects with `GitCommandError`
 *   (exit code, stderr, `timedOut`). Git runs with `LC_ALL=C` (parseable
 *   messages) and no terminal prompt.
 * - Queries (`isGitRepository`, `commitExists`, `branchCommit`,
 *   `listWorktrees`, `absoluteGitDir`, `headCommit`, `currentBranch`) answer
 *   `false`/`null` for "not there" and reject only when Git itself could not
 *   answer (timeout, crash).
 * - `isLockContention(err)`: another Git process holds a `.lock` file.
 */
import { execFile } from 'node:child_process';

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

const GIT_ENV = { ...process.env, LC_ALL: 'C', GIT_TERMINAL_PROMPT: '0' };

export function runGit(args: readonly string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      'git',
      [...args],
      { timeout: timeoutMs, env: GIT_ENV, maxBuffer: 16 * 1024 * 1024, killSignal: 'SIGKILL' },
      (err, stdout, stderr) => {
        if (!err) return resolve(stdout);
        const e = err as NodeJS.ErrnoException & { code?: unknown; killed?: boolean; signal?: string | null };
        const timedOut = e.killed === true || (e.signal !== null && e.signal !== undefined);
        const exitCode = typeof e.code === 'number' ? e.code : null;
        const detail = String(stderr).trim().split('\n').slice(-3).join(' | ');
        reject(
          new GitCommandError(
            `git ${args.join(' ')} ${timedOut ? 'timed out' : `failed (${exitCode ?? e.code ?? 'error'})`}: ${detail}`,
            args,
            exitCode,
            String(stderr),
            timedOut,
          ),
        );
      },
    );
  });
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
  const out = await runGit(['-C', repo, 'worktree', 'list', '--porcelain'], timeoutMs);
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

export async function addWorktree(
  repo: string,
  path: string,
  branch: string,
  baseCommit: string,
  timeoutMs: number,
): Promise<void> {
  await runGit(['-C', repo, 'worktree', 'add', '--quiet', '-b', branch, path, baseCommit], timeoutMs);
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
