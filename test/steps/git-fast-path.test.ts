/**
 * The Git hot path of a new worktree: the preflight (`cat-file
 * --batch-check`), the one-process inspection of a linked worktree, the
 * `.git` file read, and Git commands run from the spawner helper. Each must
 * say exactly what the full inspection (`worktree list` and friends) says, or
 * decline (null) so the caller inspects in full. Real Git, no database.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { makeGitRepo } from '../../src/bench/database';
import { GitCommandError, repositoryPreflight, runGit } from '../../src/git/cli';
import {
  inspectLinkedWorktree,
  inspectWorktree,
  linkedGitDir,
  WORKTREE_MARKER_FILE,
} from '../../src/kinds/fresh-branch-prepare/worktree-state';

const T = 15_000;
const git = (dir: string, ...args: string[]) =>
  execFileSync('git', ['-C', dir, ...args], { stdio: 'pipe' })
    .toString()
    .trim();

let repo: string;
let trees: string;
let base: string;

beforeEach(async () => {
  repo = await makeGitRepo();
  trees = await mkdtemp(join(tmpdir(), 'taskledger-fast-path-'));
  base = git(repo, 'rev-parse', 'HEAD');
});

afterEach(async () => {
  await rm(trees, { recursive: true, force: true });
  await rm(repo, { recursive: true, force: true });
});

describe('repositoryPreflight', () => {
  it('answers whether the base commit and the branch exist, with the branch commit', async () => {
    expect(await repositoryPreflight(repo, base, 'feature/x', T)).toEqual({ commit: true, branchAt: null });
    git(repo, 'branch', 'feature/x', base);
    expect(await repositoryPreflight(repo, base, 'feature/x', T)).toEqual({ commit: true, branchAt: base });
    const missing = 'f'.repeat(40);
    expect(await repositoryPreflight(repo, missing, 'feature/x', T)).toEqual({ commit: false, branchAt: base });
  });

  it('is null where Git does not answer: a directory that is not a repository, or no directory', async () => {
    expect(await repositoryPreflight(trees, base, 'b', T)).toBeNull();
    expect(await repositoryPreflight(join(trees, 'nowhere'), base, 'b', T)).toBeNull();
  });
});

describe('inspectLinkedWorktree', () => {
  it('says what the full inspection says of a new worktree, before and after its marker', async () => {
    const path = join(trees, 'wt');
    git(repo, 'worktree', 'add', '-q', '-b', 'tl/one', path, base);
    const linked = await linkedGitDir(path);
    expect(linked).not.toBeNull();
    expect(linked!.markerText).toBeNull();
    const fast = await inspectLinkedWorktree(repo, path, 'tl/one', T);
    expect(fast).toEqual(await inspectWorktree(repo, path, 'tl/one', T));
    await writeFile(join(linked!.gitDir, WORKTREE_MARKER_FILE), '{"marker":1}');
    const marked = await inspectLinkedWorktree(repo, path, 'tl/one', T);
    expect(marked?.markerText).toBe('{"marker":1}');
    expect(marked).toEqual(await inspectWorktree(repo, path, 'tl/one', T));
    expect(marked).toMatchObject({ registered: true, checkedOut: 'refs/heads/tl/one', head: base, branchAt: base });
  });

  it('reports a detached HEAD as no branch checked out, like the full inspection', async () => {
    const path = join(trees, 'wt');
    git(repo, 'worktree', 'add', '-q', '-b', 'tl/two', path, base);
    git(path, 'checkout', '-q', '--detach');
    const fast = await inspectLinkedWorktree(repo, path, 'tl/two', T);
    expect(fast).toMatchObject({ checkedOut: null, registeredBranch: null });
    expect(fast).toEqual(await inspectWorktree(repo, path, 'tl/two', T));
  });

  it("declines (null) where it cannot prove the worktree: no worktree, a missing branch, another repository's worktree", async () => {
    expect(await inspectLinkedWorktree(repo, join(trees, 'nothing'), 'tl/x', T)).toBeNull();
    const path = join(trees, 'wt');
    git(repo, 'worktree', 'add', '-q', '-b', 'tl/three', path, base);
    expect(await inspectLinkedWorktree(repo, path, 'tl/not-there', T)).toBeNull();
    const other = await makeGitRepo();
    try {
      const foreign = join(trees, 'foreign');
      git(other, 'worktree', 'add', '-q', '-b', 'tl/three', foreign, 'main');
      expect(await inspectLinkedWorktree(repo, foreign, 'tl/three', T)).toBeNull();
      expect(await linkedGitDir(repo)).toBeNull();
    } finally {
      await rm(other, { recursive: true, force: true });
    }
  });
});

describe('runGit', () => {
  it('answers from the helper process, and a failing command is a GitCommandError with its exit status', async () => {
    expect((await runGit(['-C', repo, 'rev-parse', 'HEAD'], T)).trim()).toBe(base);
    const err = await runGit(['-C', repo, 'rev-parse', '--verify', 'no-such-ref'], T).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(GitCommandError);
    expect((err as GitCommandError).exitCode).toBe(128);
    expect((err as GitCommandError).timedOut).toBe(false);
  });

  it('passes its input to Git on stdin', async () => {
    const out = await runGit(['-C', repo, 'cat-file', '--batch-check=%(objecttype)'], T, `${base}\n`);
    expect(out.trim()).toBe('commit');
  });
});
