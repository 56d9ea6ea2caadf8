/**
 * The Git shape's baseline: a bare shell loop of `git worktree add -b`, one
 * worktree at a time with no ledger around it, in the very repository the
 * Git shape then uses. The Git shape's throughput is reported as a ratio to
 * this loop's worktrees/s.
 *
 * Why this way: `git worktree add` slows as a repository's worktrees grow
 * (it reads every one of them), so the loop makes as many as the shape will
 * and starts from the same state; and it runs as one shell process, so the
 * loop pays no Node fork per command (a fork of the bench's heap would make
 * the baseline slower than Git is).
 *
 * Contract: `measureGitBaseline(repo, count, scratch)` creates `count` branches and
 * worktrees of `repo`'s `main` in a directory under `scratch`, times the loop, then
 * removes the worktrees, their registrations and their branches, leaving
 * `repo` as it found it.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { promisify } from 'node:util';

const exec = promisify(execFile);

export interface GitBaseline {
  worktrees: number;
  perSecond: number;
  /** Git commands the loop runs per worktree (always 1: the baseline is one `git worktree add -b`). */
  commandsPerWorktree: number;
}

const LOOP = `i=0
while [ "$i" -lt "$2" ]; do
  git -C "$1" worktree add -q -b "taskledger-baseline-$i" "$3/wt-$i" main || exit 1
  i=$((i + 1))
done`;

export async function measureGitBaseline(repo: string, count: number, scratch: string): Promise<GitBaseline> {
  const trees = await mkdtemp(join(scratch, 'taskledger-bench-baseline-'));
  try {
    const started = performance.now();
    await exec('sh', ['-c', LOOP, 'baseline', repo, String(count), trees], { maxBuffer: 16 * 1024 * 1024 });
    const ms = performance.now() - started;
    return { worktrees: count, perSecond: count / (ms / 1000), commandsPerWorktree: 1 };
  } finally {
    await rm(trees, { recursive: true, force: true });
    await exec('git', ['-C', repo, 'worktree', 'prune']);
    const refs = await exec('git', [
      '-C',
      repo,
      'for-each-ref',
      '--format=delete %(refname)',
      'refs/heads/taskledger-baseline-*',
    ]);
    if (refs.stdout.trim() !== '') {
      await new Promise<void>((resolve, reject) => {
        const child = execFile('git', ['-C', repo, 'update-ref', '--stdin'], (err) =>
          err ? reject(new Error(err.message)) : resolve(),
        );
        child.stdin?.end(refs.stdout);
      });
    }
  }
}
