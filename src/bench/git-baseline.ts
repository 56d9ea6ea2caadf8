/**
 * The Git shape's baseline: a bare loop of `git worktree add -b` on a fresh
 * repository of the same kind the bench seeds (one commit), one worktree at a
 * time, with no ledger around it. The Git shape's throughput is reported as a
 * ratio to this loop's worktrees/s.
 *
 * Contract: `measureGitBaseline(count)` creates `count` branches and
 * worktrees in a scratch directory, times the loop, and removes everything it
 * made before returning.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { promisify } from 'node:util';
import { makeGitRepo } from './database';

const exec = promisify(execFile);

export interface GitBaseline {
  worktrees: number;
  perSecond: number;
  /** Git commands the loop runs per worktree (always 1: the baseline is one `git worktree add -b`). */
  commandsPerWorktree: number;
}

export async function measureGitBaseline(count: number): Promise<GitBaseline> {
  const repo = await makeGitRepo();
  const trees = await mkdtemp(join(tmpdir(), 'taskledger-bench-baseline-'));
  try {
    const started = performance.now();
    for (let i = 0; i < count; i++) {
      await exec('git', ['-C', repo, 'worktree', 'add', '-q', '-b', `baseline-${i}`, join(trees, `wt-${i}`), 'main']);
    }
    const ms = performance.now() - started;
    return { worktrees: count, perSecond: count / (ms / 1000), commandsPerWorktree: 1 };
  } finally {
    await rm(trees, { recursive: true, force: true });
    await rm(repo, { recursive: true, force: true });
  }
}
