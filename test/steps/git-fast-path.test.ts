/**
 * The Git hot path of a new worktree: the preflight (Git's files, else
 * `cat-file --batch-check`), the inspection of a linked worktree (its files,
 * else one `rev-parse`), the
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
  branchCommitFromFiles,
  fileRef,
  filesRepository,
  hasLooseObject,
  looseCommit,
  ownedByMe,
} from '../../src/git/files';
import { GitError, resolveCommit } from '../../src/git/rev-parse';
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

/** Runs `fn` with every Git process this process starts failing (`GIT_DIR` pointed at nothing). */
const withoutGit = async <R>(fn: () => Promise<R>): Promise<R> => {
  process.env.GIT_DIR = join(trees, 'no-such-git-dir');
  try {
    return await fn();
  } finally {
    delete process.env.GIT_DIR;
  }
};

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
    const linked = linkedGitDir(path);
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
      expect(linkedGitDir(repo)).toBeNull();
    } finally {
      await rm(other, { recursive: true, force: true });
    }
  });
});

/**
 * Git's files, read without a Git process. `GIT_DIR` pointed at nothing makes every Git command this process
 * starts fail, so an answer given meanwhile came from the files; and where the files do not prove an answer
 * (packed objects, a packed branch, a detached HEAD) the same call then has none, and Git gives it again once
 * `GIT_DIR` is gone.
 */
describe("from Git's files", () => {
  it('the preflight proves a loose base commit and no branch from the files alone', async () => {
    expect(await withoutGit(() => repositoryPreflight(repo, base, 'feature/y', T))).toEqual({
      commit: true,
      branchAt: null,
    });
    // A branch that exists, loose or packed, is Git's to answer.
    git(repo, 'branch', 'feature/y', base);
    expect(await withoutGit(() => repositoryPreflight(repo, base, 'feature/y', T))).toBeNull();
    git(repo, 'pack-refs', '--all');
    expect(fileRef(join(repo, '.git'), 'refs/heads/feature/y')).toBeNull();
    expect(await withoutGit(() => repositoryPreflight(repo, base, 'feature/y', T))).toBeNull();
    expect(await repositoryPreflight(repo, base, 'feature/y', T)).toEqual({ commit: true, branchAt: base });
  });

  it('the preflight asks Git for a packed base commit, and for a repository whose refs are not plain files', async () => {
    git(repo, 'gc', '-q');
    expect(hasLooseObject(join(repo, '.git'), base)).toBe(false);
    expect(await withoutGit(() => repositoryPreflight(repo, base, 'tl/z', T))).toBeNull();
    expect(await repositoryPreflight(repo, base, 'tl/z', T)).toEqual({ commit: true, branchAt: null });
    expect(filesRepository(join(repo, 'no-such-dir'))).toBeNull();
    expect(filesRepository(trees)).toBeNull();
    const wt = join(trees, 'wt');
    git(repo, 'worktree', 'add', '-q', '-b', 'tl/wt', wt, base);
    expect(filesRepository(wt)).toBeNull();
    expect(filesRepository(repo)).toBe(join(repo, '.git'));
  });

  it('reads refs exactly: a loose commit, absent, or null for what only Git can say', async () => {
    const common = join(repo, '.git');
    expect(fileRef(common, 'refs/heads/main')).toEqual({ oid: base });
    expect(fileRef(common, 'refs/heads/none')).toBe('absent');
    expect(fileRef(common, 'refs/heads/main/below')).toBeNull();
    expect(fileRef(common, 'refs/heads/../HEAD')).toBeNull();
    expect(fileRef(common, 'HEAD')).toBeNull();
    git(repo, 'symbolic-ref', 'refs/heads/alias', 'refs/heads/main');
    expect(fileRef(common, 'refs/heads/alias')).toBeNull();
    expect(ownedByMe(repo)).toBe(true);
    expect(ownedByMe(join(trees, 'nothing'))).toBe(false);
  });

  it('a new worktree is proven from its files; a detached or packed one is left to Git', async () => {
    const path = join(trees, 'wt');
    git(repo, 'worktree', 'add', '-q', '-b', 'tl/files', path, base);
    const fast = await withoutGit(() => inspectLinkedWorktree(repo, path, 'tl/files', T));
    expect(fast).toMatchObject({ registered: true, checkedOut: 'refs/heads/tl/files', head: base, branchAt: base });
    expect(fast).toEqual(await inspectWorktree(repo, path, 'tl/files', T));
    git(repo, 'pack-refs', '--all');
    expect(await withoutGit(() => inspectLinkedWorktree(repo, path, 'tl/files', T))).toBeNull();
    expect(await inspectLinkedWorktree(repo, path, 'tl/files', T)).toEqual(fast);
    git(path, 'checkout', '-q', '--detach');
    expect(await withoutGit(() => inspectLinkedWorktree(repo, path, 'tl/files', T))).toBeNull();
    expect(await inspectLinkedWorktree(repo, path, 'tl/files', T)).toMatchObject({ checkedOut: null, head: base });
  });

  it("a worktree whose administrative directory is another repository's is not proven registered", async () => {
    const other = await makeGitRepo();
    try {
      const foreign = join(trees, 'foreign');
      git(other, 'worktree', 'add', '-q', '-b', 'tl/f', foreign, 'main');
      expect(await withoutGit(() => inspectLinkedWorktree(other, foreign, 'tl/f', T))).not.toBeNull();
      expect(await withoutGit(() => inspectLinkedWorktree(repo, foreign, 'tl/f', T))).toBeNull();
    } finally {
      await rm(other, { recursive: true, force: true });
    }
  });
});

describe("Begin's base branch from Git's files", () => {
  it('resolves a plain branch whose loose ref names a loose commit without Git, as Git does', async () => {
    expect(branchCommitFromFiles(repo, 'main')).toBe(base);
    expect(await withoutGit(() => resolveCommit(repo, 'main'))).toBe(base);
    git(repo, 'branch', 'feature/one', base);
    expect(await withoutGit(() => resolveCommit(repo, 'feature/one'))).toBe(git(repo, 'rev-parse', 'feature/one'));
  });

  it('leaves to Git what the files do not prove: a tag of the same name, revision syntax, packed refs or objects', async () => {
    const common = join(repo, '.git');
    expect(looseCommit(common, base)).toBe(true);
    expect(looseCommit(common, git(repo, 'rev-parse', 'HEAD^{tree}'))).toBe(false);
    expect(looseCommit(common, 'f'.repeat(40))).toBe(false);
    // A tag is found before a branch of the same name: Git's answer, not the branch's.
    await writeFile(join(repo, 'second.md'), 'two\n');
    git(repo, 'add', 'second.md');
    git(repo, 'commit', '-q', '-m', 'second');
    const second = git(repo, 'rev-parse', 'HEAD');
    git(repo, 'branch', 'release', second);
    git(repo, 'tag', 'release', base);
    expect(branchCommitFromFiles(repo, 'release')).toBeNull();
    expect(await resolveCommit(repo, 'release')).toBe(base);
    for (const name of ['HEAD', 'main~1', 'main^', base.slice(0, 7), 'a..b', 'x.lock', '-main', 'feature/']) {
      expect(branchCommitFromFiles(repo, name)).toBeNull();
    }
    expect(await resolveCommit(repo, 'main~1')).toBe(base);
    // Packed: only Git answers, and it answers the same.
    git(repo, 'gc', '-q');
    expect(branchCommitFromFiles(repo, 'main')).toBeNull();
    expect(await withoutGit(() => resolveCommit(repo, 'main').catch((e: unknown) => e))).toBeInstanceOf(GitError);
    expect(await resolveCommit(repo, 'main')).toBe(second);
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
