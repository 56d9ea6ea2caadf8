/**
 * `fresh_branch_prepare` against a real Git repository and the real
 * database: the worktree on its new branch at the base commit, the marker
 * file in the worktree's own git directory, the environment-repo row and the
 * Git proof evidence; stale deliveries; permanent, transient and ambiguous
 * failures (foreign work is never touched); acceptance of this step's own
 * earlier attempt; and observation. Runs on PostgreSQL and MySQL/MariaDB.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { rowHash } from '../../src/canonical/hash';
import type { FreshBranchPrepareRequest } from '../../src/canonical/types';
import { validateStepEvidence } from '../../src/canonical/validate';
import {
  freshBranchPrepareHandler,
  markerFileText,
  plannedWorktreePath,
  WORKTREE_MARKER_FILE,
} from '../../src/kinds/fresh-branch-prepare/step';
import { freshBranchObservation, persistWorktreeMarker } from '../../src/kinds/fresh-branch-prepare/ledger';
import { resourceMarkerSha256 } from '../../src/store/effects/recording';
import { environmentRepoDoc } from '../../src/store/effects/row-documents';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import { count, sql, useTestDb } from '../support/db';
import { expectTyped } from '../support/ledger';
import {
  claimKind,
  createTask,
  effectDeps,
  effectSnapshot,
  git,
  loadStep,
  noHeartbeat,
  seedWithFiles,
  stepState,
} from './support';

const t = useTestDb();

async function setup(repo: Record<string, unknown> = {}) {
  const { ws, deps } = await seedWithFiles(t.db);
  const c = await createTask(t.db, ws, { repositories: [{ repository_id: ws.repositoryId, ...repo }] });
  const claim = await claimKind(t.db, c.auth, c.operationId, 'fresh_branch_prepare');
  const req = claim.request as FreshBranchPrepareRequest;
  const path = join(ws.dataDir, 'worktrees', ws.workspaceId, c.taskId, ws.repositoryId);
  const owner = { operation_id: c.operationId, step_id: claim.stepId };
  const worktrees = () => git(ws.repoPath, 'worktree', 'list', '--porcelain');
  const branchExists = () => git(ws.repoPath, 'branch', '--list', req.branch).trim() !== '';
  return {
    ws,
    deps,
    c,
    claim,
    req,
    path,
    owner,
    worktrees,
    branchExists,
    snap: () => effectSnapshot(t.db, c.operationId, c.taskId),
  };
}

describe('fresh_branch_prepare perform', () => {
  it('creates the registered worktree on the branch at the base, the marker file, the row and the Git proof', async () => {
    const s = await setup();
    expect(await freshBranchPrepareHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('succeeded');

    expect(s.worktrees()).toContain(
      `worktree ${s.path}\nHEAD ${s.req.base_commit}\nbranch refs/heads/${s.req.branch}\n`,
    );
    expect(git(s.path, 'rev-parse', 'HEAD').trim()).toBe(s.req.base_commit);
    expect(git(s.ws.repoPath, 'rev-parse', `refs/heads/${s.req.branch}`).trim()).toBe(s.req.base_commit);
    const gitDir = git(s.path, 'rev-parse', '--absolute-git-dir').trim();
    const markerSha = resourceMarkerSha256(s.c.operationId, s.claim.stepId, s.req.resource_key);
    const marker = readFileSync(join(gitDir, WORKTREE_MARKER_FILE), 'utf8');
    expect(marker).toBe(markerFileText(s.req, s.owner));
    expect(JSON.parse(marker)).toEqual({
      base_commit: s.req.base_commit,
      branch: s.req.branch,
      marker_sha256: markerSha,
      operation_id: s.c.operationId,
      resource_key: s.req.resource_key,
      step_id: s.claim.stepId,
    });
    expect(existsSync(join(s.path, WORKTREE_MARKER_FILE))).toBe(false);
    expect(git(s.path, 'status', '--porcelain')).toBe('');

    const [row] = await sql(t.db, 'SELECT * FROM task_environment_repos WHERE id = ?', [
      s.req.task_environment_repo_id,
    ]);
    expect(row).toMatchObject({
      environment_id: s.req.task_environment_id,
      repository_id: s.ws.repositoryId,
      worktree_path: s.path,
      branch: s.req.branch,
      base_commit: s.req.base_commit,
      operation_id: s.c.operationId,
      step_id: s.claim.stepId,
    });
    const [markerRow] = await sql(t.db, 'SELECT * FROM task_resource_markers WHERE resource_key = ?', [
      s.req.resource_key,
    ]);
    expect(markerRow).toMatchObject({ kind: 'worktree', marker_sha256: markerSha, step_id: s.claim.stepId });

    const { state, evidence } = await stepState(t.db, s.claim.stepId);
    expect(state).toBe('succeeded');
    validateStepEvidence(evidence, {
      kind: 'fresh_branch_prepare',
      step_key: s.claim.stepKey,
      request_sha256: s.claim.requestSha256,
    });
    expect(evidence!.observation).toEqual(freshBranchObservation(s.req, s.owner, s.path));
    expect(evidence!.observation.environment_repo_row_sha256).toBe(rowHash(environmentRepoDoc(row!)));
    const [own] = await sql(t.db, 'SELECT ownership_marker FROM task_creation_steps WHERE id = ?', [s.claim.stepId]);
    expect(own!.ownership_marker).toBe(markerSha);
  });

  it('a second delivery of the same claim is stale, runs no Git and changes nothing', async () => {
    const s = await setup();
    await freshBranchPrepareHandler.perform(s.deps, s.claim, noHeartbeat);
    const before = [await s.snap(), s.worktrees()];
    await expectTyped(freshBranchPrepareHandler.perform(s.deps, s.claim, noHeartbeat), 'stale_claim');
    expect([await s.snap(), s.worktrees()]).toEqual(before);
  });

  it.each([
    ['a directory that is not a Git repository', () => mkdtempSync(join(tmpdir(), 'taskledger-plain-'))],
    ['a path that does not exist', () => join(tmpdir(), 'taskledger-missing', String(Date.now()))],
  ])('repository path is %s: failed with absent proof, nothing created', async (_n, makePath) => {
    const s = await setup();
    await sql(t.db, 'UPDATE repositories SET path = ? WHERE id = ?', [makePath(), s.ws.repositoryId]);
    expect(await freshBranchPrepareHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('failed');
    const st = await stepState(t.db, s.claim.stepId);
    expect(st.error_code).toBe('not_a_repository');
    expect(st.evidence!.effect).toBe('absent_proven');
    expect(await count(t.db, 'task_resource_markers', 'task_id = ?', [s.c.taskId])).toBe(0);
    expect(existsSync(s.path)).toBe(false);
  });

  it('a base commit that no longer exists: failed (base_commit_missing)', async () => {
    const { ws } = await seedWithFiles(t.db);
    git(ws.repoPath, 'checkout', '-q', '-b', 'feature');
    writeFileSync(join(ws.repoPath, 'f.txt'), 'feature\n');
    git(ws.repoPath, 'add', 'f.txt');
    git(ws.repoPath, 'commit', '-q', '-m', 'feature');
    git(ws.repoPath, 'checkout', '-q', 'main');
    const c = await createTask(t.db, ws, {
      repositories: [{ repository_id: ws.repositoryId, base_branch: 'feature' }],
    });
    git(ws.repoPath, 'branch', '-q', '-D', 'feature');
    git(ws.repoPath, 'reflog', 'expire', '--expire=now', '--all');
    git(ws.repoPath, 'gc', '-q', '--prune=now');
    const claim = await claimKind(t.db, c.auth, c.operationId, 'fresh_branch_prepare');
    expect(await freshBranchPrepareHandler.perform(effectDeps(t.db, ws.dataDir), claim, noHeartbeat)).toBe('failed');
    expect((await stepState(t.db, claim.stepId)).error_code).toBe('base_commit_missing');
  });

  it('foreign files at the worktree path: unknown, the foreign files untouched, no branch', async () => {
    const s = await setup();
    mkdirSync(s.path, { recursive: true });
    writeFileSync(join(s.path, 'foreign.txt'), 'not ours\n');
    expect(await freshBranchPrepareHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('unknown');
    const st = await stepState(t.db, s.claim.stepId);
    expect(st.error_code).toBe('foreign_worktree');
    expect(st.evidence!.effect).toBe('conflict');
    expect(readFileSync(join(s.path, 'foreign.txt'), 'utf8')).toBe('not ours\n');
    expect(s.branchExists()).toBe(false);
    expect(await count(t.db, 'task_environment_repos', 'id = ?', [s.req.task_environment_repo_id])).toBe(0);
  });

  it('a foreign branch with the planned name: unknown, the branch untouched', async () => {
    const s = await setup();
    git(s.ws.repoPath, 'branch', s.req.branch);
    const tip = git(s.ws.repoPath, 'rev-parse', `refs/heads/${s.req.branch}`);
    expect(await freshBranchPrepareHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('unknown');
    expect(git(s.ws.repoPath, 'rev-parse', `refs/heads/${s.req.branch}`)).toBe(tip);
    expect(existsSync(s.path)).toBe(false);
  });

  it("accepts this step's own earlier attempt, proven by its marker file", async () => {
    const s = await setup();
    expect(await persistWorktreeMarker(t.db, s.claim)).toBe('persisted');
    git(s.ws.repoPath, 'worktree', 'add', '-q', '-b', s.req.branch, s.path, s.req.base_commit);
    const gitDir = git(s.path, 'rev-parse', '--absolute-git-dir').trim();
    writeFileSync(join(gitDir, WORKTREE_MARKER_FILE), markerFileText(s.req, s.owner));
    const outcome = await freshBranchPrepareHandler.perform(s.deps, s.claim, noHeartbeat);
    // With the step's error beside it: an outcome other than success says why (a CI run met `unknown` once).
    const st = await stepState(t.db, s.claim.stepId);
    expect({ outcome, error: st.error_code, evidence: st.evidence?.effect }).toEqual({
      outcome: 'succeeded',
      error: null,
      evidence: 'present_exact',
    });
  });

  it('a worktree without the marker (crash before the marker was written) is unknown and left alone', async () => {
    const s = await setup();
    git(s.ws.repoPath, 'worktree', 'add', '-q', '-b', s.req.branch, s.path, s.req.base_commit);
    expect(await freshBranchPrepareHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('unknown');
    expect(s.worktrees()).toContain(`worktree ${s.path}\n`);
  });

  it('Git lock contention with nothing created is transient (retry_wait, absent proof); the retry succeeds', async () => {
    const s = await setup();
    const lock = join(s.ws.repoPath, '.git', 'refs', 'heads', `${s.req.branch}.lock`);
    mkdirSync(join(lock, '..'), { recursive: true });
    writeFileSync(lock, '');
    expect(await freshBranchPrepareHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('retry_wait');
    const st = await stepState(t.db, s.claim.stepId);
    expect(st.error_code).toBe('git_lock_contention');
    expect(st.evidence!.effect).toBe('absent_proven');
    rmSync(lock);
    const again = await claimTaskCreationStep(
      t.db,
      s.c.auth,
      { kind: 'fresh_branch_prepare', stepKey: s.claim.stepKey },
      'w2',
    );
    expect(await freshBranchPrepareHandler.perform(s.deps, again, noHeartbeat)).toBe('succeeded');
  });

  it("losing a race with another process's worktree add: its branch is undone, transient; the retry succeeds", async () => {
    const s = await setup();
    // Another process's half-written worktree admin directory, as Git sees it mid-`worktree add`.
    const other = join(s.ws.repoPath, '.git', 'worktrees', 'other-process');
    mkdirSync(other, { recursive: true });
    writeFileSync(join(other, 'gitdir'), join(tmpdir(), 'elsewhere', '.git'));
    writeFileSync(join(other, 'commondir'), '');
    expect(await freshBranchPrepareHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('retry_wait');
    const st = await stepState(t.db, s.claim.stepId);
    expect(st.error_code).toBe('git_worktree_race');
    expect(st.evidence!.effect).toBe('absent_proven');
    expect(s.branchExists()).toBe(false);
    expect(existsSync(s.path)).toBe(false);
    rmSync(other, { recursive: true });
    const again = await claimTaskCreationStep(
      t.db,
      s.c.auth,
      { kind: 'fresh_branch_prepare', stepKey: s.claim.stepKey },
      'w2',
    );
    expect(await freshBranchPrepareHandler.perform(s.deps, again, noHeartbeat)).toBe('succeeded');
    expect(s.branchExists()).toBe(true);
  });
});

describe('fresh_branch_prepare observe', () => {
  it('absent before and with only the marker row; present after; conflict when HEAD moves or the marker file goes', async () => {
    const s = await setup();
    const observe = async () => freshBranchPrepareHandler.observe(s.deps, await loadStep(t.db, s.claim.stepId));
    expect((await observe()).effect).toBe('absent_proven');
    await persistWorktreeMarker(t.db, s.claim);
    const markerOnly = await observe();
    expect(markerOnly.effect).toBe('absent_proven');
    expect(markerOnly.evidence.effect).toBe('absent_proven');

    await freshBranchPrepareHandler.perform(s.deps, s.claim, noHeartbeat);
    const present = await observe();
    expect(present.effect).toBe('present_exact');
    expect(present.evidence.observation).toEqual(freshBranchObservation(s.req, s.owner, s.path));

    const gitDir = git(s.path, 'rev-parse', '--absolute-git-dir').trim();
    rmSync(join(gitDir, WORKTREE_MARKER_FILE));
    expect((await observe()).effect).toBe('conflict');
    writeFileSync(join(gitDir, WORKTREE_MARKER_FILE), markerFileText(s.req, s.owner));
    expect((await observe()).effect).toBe('present_exact');

    git(
      s.path,
      '-c',
      'user.email=t@taskledger.invalid',
      '-c',
      'user.name=t',
      'commit',
      '-q',
      '--allow-empty',
      '-m',
      'moved',
    );
    const moved = await observe();
    expect(moved.effect).toBe('conflict');
    expect(moved.evidence.effect).toBe('conflict');
  });
});

describe('fresh_branch_prepare path binding', () => {
  it('a renamed repository or another data directory does not break a planned worktree', async () => {
    const s = await setup();
    await sql(t.db, 'UPDATE repositories SET name = ? WHERE id = ?', ['renamed-by-an-admin', s.ws.repositoryId]);
    expect(await freshBranchPrepareHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('succeeded');
    expect(existsSync(s.path)).toBe(true);
    // A worker configured with another data directory puts the same worktree under its own (same relative place).
    const other = mkdtempSync(join(tmpdir(), 'taskledger-other-data-'));
    expect(plannedWorktreePath(other, s.req, 'anything')).toBe(
      join(other, 'worktrees', s.ws.workspaceId, s.c.taskId, s.ws.repositoryId),
    );
  });
});
