/**
 * `fresh_branch_prepare`: a Git worktree on a new branch at the planned base
 * commit, at the path the plan builder derived (not carried in the request:
 * recomputed here from the repository name and proven by
 * `canonical_path_sha256`).
 *
 * perform, in order:
 * 1. plain reads and read-only Git checks (no ledger write): repository row,
 *    planned path, repository is a Git repository, base commit exists (one
 *    `cat-file --batch-check`, which also says whether the branch exists) —
 *    any of these failing is a permanent failure with `absent_proven`
 *    evidence;
 * 2. `persistWorktreeMarker` (one transaction): the step's ownership marker
 *    row is committed before any Git mutation — unless the ledger batch that
 *    claimed the step wrote it with the claim (`markerWithClaim`, ADR 0040);
 *    a failure in 1 then deletes that marker in its own transaction
 *    (`failDroppingMarker`), leaving what a failure before 2 leaves;
 * 3. outside any transaction: `git worktree add -b <branch> <path> <base>`,
 *    then the marker file `taskledger-owner.json` in the worktree's own git
 *    directory (the agent's checkout stays untouched). A worktree that is
 *    already there is accepted only with this step's exact marker file (a
 *    previous attempt got that far); anything else at the path or branch is
 *    foreign: `unknown`, never deleted. A failed `git worktree add` that left
 *    nothing behind is transient (`retry_wait`, `absent_proven`), and so is
 *    one that lost a race with another process's `worktree add` and left
 *    only its new branch at the base commit (the branch is deleted by
 *    compare-and-set first); one that left anything else is ambiguous
 *    (`unknown`);
 * 4. re-inspects (registered, on the branch, HEAD = base, marker) and records
 *    success with `recordFreshBranch` (one transaction), or through the
 *    worker's `record` in the ledger batch that then arms the launch intent
 *    (the same record under the same locks, ADR 0041).
 * The usual case (a loose base commit, no branch, nothing at the path) runs
 * one Git process, `worktree add`: the preflight and the proof once the
 * marker file is written (`inspectLinkedWorktree`) read the files Git keeps
 * (src/git/files.ts, ADR 0037), and start a Git process only where those do
 * not prove the answer; the marker goes to the directory the worktree's
 * `.git` file names.
 * Only a path or branch already there, or a failure, pays for the full
 * inspection (`git worktree list`, which grows with the repository).
 * A crash between `worktree add` and the marker-file write leaves a worktree
 * without a marker: a retry then reports it `unknown` (ownership cannot be
 * proven), by design.
 *
 * observe: exact row, marker row, registration, branch, HEAD and marker file
 * -> present; no environment-repo row and no worktree, path or branch ->
 * absent (the marker row alone proves nothing was mutated); no
 * environment-repo row but the exact worktree with this step's marker file
 * and marker row (a crash between effect and record) -> absent as recorded,
 * so the step retries and perform adopts the marked worktree; else conflict.
 */
import { failpoint } from '../../failpoints';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { canonicalJson } from '../../canonical/canonical-json';
import type { FreshBranchPrepareRequest } from '../../canonical/types';
import type { Db } from '../../db/tx';
import { dbReader } from '../../store/effects/row-locks';
import { pathSha256, sanitizeRepoName, worktreePath, worktreeRelativePath } from '../../plan/fresh-branch';
import {
  failDroppingMarker,
  freshBranchObservation,
  freshBranchRecord,
  freshBranchRowSet,
  markerWrittenWithClaim,
  persistWorktreeMarker,
  worktreeMarkerWithClaim,
  readFreshBranchRows,
  readRepository,
  recordFreshBranch,
  repositoryReadWith,
  type RepositoryRow,
  expectedMarker,
  type FreshBranchRows,
} from './ledger';
import {
  ownerOf,
  presentEvidenceOf,
  requestOf,
  rowSetEvidenceOf,
  stepRequestOf,
  type EffectOwner,
  type ObservedRow,
} from '../../store/effects/recording';
import { rowHash } from '../../store/effects/row-documents';
import { failTaskCreationStep } from '../../store/step-results';
import type { StepClaim, StepRow } from '../../store/types';
import type { RecordHeld } from '../../store/ledger-apply';
import {
  addWorktree,
  commitExists,
  deleteBranchAt,
  isGitRepository,
  isLockContention,
  isWorktreeRace,
  repositoryPreflight,
} from '../../git/cli';
import type { Observation, StepHandler } from '../contract';
import { inspectWorktree as inspectForUndo, isUntouched, removeUntouchedWorktree } from './git-worktree';
import {
  inspectLinkedWorktree,
  inspectWorktree,
  linkedGitDir,
  nothingThere,
  pathExists,
  WORKTREE_MARKER_FILE,
  type WorktreeState,
} from './worktree-state';

export { WORKTREE_MARKER_FILE };

type Req = FreshBranchPrepareRequest;

async function repositoryOf(db: Db, req: Req): Promise<RepositoryRow | null> {
  return readRepository(dbReader(db), req);
}

/**
 * The path the plan bound: `<dataDir>/worktrees/<workspace>/<task>/<repository_id>` (its relative part hashes
 * to `canonical_path_sha256`); for a plan written before that scheme, the sanitized name, or name-<id> on a
 * collision, under this worker's data directory (proven by the whole path's hash).
 */
export function plannedWorktreePath(dataDir: string, req: Req, repoName: string): string | null {
  const relative = worktreeRelativePath(req.workspace_id, req.task_id, req.repository_id);
  if (pathSha256(relative) === req.canonical_path_sha256) return join(dataDir, ...relative.split('/'));
  const segment = sanitizeRepoName(repoName);
  for (const s of [segment, `${segment}-${req.repository_id}`]) {
    const p = worktreePath(dataDir, req.workspace_id, req.task_id, s);
    if (pathSha256(p) === req.canonical_path_sha256) return p;
  }
  return null;
}

export function markerFileText(req: Req, owner: EffectOwner): string {
  return canonicalJson({
    base_commit: req.base_commit,
    branch: req.branch,
    marker_sha256: expectedMarker(req, owner).marker_sha256,
    operation_id: owner.operation_id,
    resource_key: req.resource_key,
    step_id: owner.step_id,
  });
}

type GitState = WorktreeState;

const inspect = (repo: string, path: string, branch: string, timeoutMs: number) =>
  inspectWorktree(repo, path, branch, timeoutMs);

/** What a `worktree add -b` that lost a race leaves: the new branch at the base commit, no path, no registration. */
const onlyNewBranch = (g: GitState, req: Req) => !g.pathExists && !g.registered && g.branchAt === req.base_commit;

function exact(g: GitState, req: Req, marker: string): boolean {
  const ref = `refs/heads/${req.branch}`;
  return (
    g.registered &&
    g.registeredBranch === ref &&
    g.checkedOut === ref &&
    g.head === req.base_commit &&
    g.branchAt === req.base_commit &&
    g.markerText === marker
  );
}

/** The observed Git state as one evidence row (null hash: nothing there). */
function gitRows(req: Req, g: GitState | null, dbRows: FreshBranchRows | null = null): ObservedRow[] {
  const rows = freshBranchRowSet(req, dbRows).filter((r) => r.table !== 'git_worktrees');
  const doc = g && {
    path_exists: g.pathExists,
    registered: g.registered,
    registered_branch: g.registeredBranch,
    branch_commit: g.branchAt,
    head: g.head,
    marker_file_sha256: g.markerText === null ? null : rowHash(g.markerText),
  };
  rows.push({ table: 'git_worktrees', key: req.resource_key, row_sha256: g && !nothingThere(g) ? rowHash(doc) : null });
  return rows;
}

/** Synchronous, as the Git files are read (src/git/small-reads.ts, ADR 0040): two system calls on a local file. */
function writeMarkerFile(gitDir: string, text: string): void {
  const target = join(gitDir, WORKTREE_MARKER_FILE);
  const tmp = `${target}.${process.pid}.${Date.now()}.tmp`;
  writeFileSync(tmp, text, { flag: 'wx' });
  renameSync(tmp, target);
}

async function fail(
  db: Db,
  claim: StepClaim,
  cls: 'permanent' | 'transient' | 'ambiguous',
  code: string,
  message: string,
  rows: ObservedRow[],
) {
  const evidence = rowSetEvidenceOf(claim, cls === 'ambiguous' ? 'conflict' : 'absent_proven', message, rows);
  return failTaskCreationStep(db, claim, { class: cls, code, message: message.slice(0, 2000), evidence });
}

async function perform(
  deps: Parameters<StepHandler['perform']>[0],
  claim: StepClaim,
  heartbeat: () => Promise<void>,
  record?: RecordHeld,
) {
  const { db, timeoutMs } = deps;
  const req = requestOf(claim, 'fresh_branch_prepare');
  const owner = ownerOf(claim);
  const none = gitRows(req, null);
  // The ledger batch that claimed this step wrote its marker row with the claim (ADR 0040): a failure before Git
  // is touched deletes it again, so the step ends as if its marker had never been written.
  const marked = markerWrittenWithClaim(claim);
  const failBeforeGit = (code: string, message: string) =>
    marked
      ? failDroppingMarker(db, claim, code, message, none).then((o) => o.state)
      : fail(db, claim, 'permanent', code, message, none);
  // Read with the claim when the batch claimed it (ADR 0041); the Git preflight below proves what it names.
  const withClaim = repositoryReadWith(claim);
  const repo = withClaim === undefined ? await repositoryOf(db, req) : withClaim;
  if (!repo) return failBeforeGit('repository_missing', 'the repository row is gone');
  const path = plannedWorktreePath(deps.dataDir, req, repo.name);
  if (path === null)
    return failBeforeGit('path_mismatch', 'no derivable worktree path hashes to canonical_path_sha256');
  const pre = await repositoryPreflight(repo.path, req.base_commit, req.branch, timeoutMs);
  if (pre === null && !(await isGitRepository(repo.path, timeoutMs))) {
    return failBeforeGit('not_a_repository', `${repo.path} is not a Git repository`);
  }
  if (!(pre?.commit ?? (await commitExists(repo.path, req.base_commit, timeoutMs)))) {
    return failBeforeGit('base_commit_missing', `commit ${req.base_commit} is not in the repository`);
  }
  await heartbeat();
  if (!marked) {
    const persisted = await persistWorktreeMarker(db, claim);
    if (persisted !== 'persisted') return persisted.state;
  }
  // Live right before Git is touched (renewed unless the claim or the last renewal is under a quarter lease old):
  // the marker's transaction may have taken seconds (a lost connection restarts it), and Git must never run under
  // a lease that could expire before it ends (each command's timeout is at most half the lease): once the lease
  // has expired, the reaper may observe "absent".
  await heartbeat();

  const marker = markerFileText(req, owner);
  // A new worktree's usual case — no branch (preflight) and nothing at the planned path — needs no full
  // inspection; anything else is inspected in full before Git is touched.
  const fresh = pre !== null && pre.branchAt === null && !pathExists(path);
  const before = fresh ? null : await inspect(repo.path, path, req.branch, timeoutMs);
  if (before === null || nothingThere(before)) {
    try {
      mkdirSync(dirname(path), { recursive: true });
      await addWorktree(repo.path, path, req.branch, req.base_commit, timeoutMs);
    } catch (err) {
      let after = await inspect(repo.path, path, req.branch, timeoutMs);
      const message = (err as Error).message;
      if (isWorktreeRace(err) && onlyNewBranch(after, req)) {
        // Lost a race with another process's `worktree add` in this repository: Git created our branch and
        // stopped. Nothing was at the path or branch before this add (checked above), so the branch is this
        // add's; it is deleted only while it still points at the base commit, and the step retries.
        await deleteBranchAt(repo.path, req.branch, req.base_commit, timeoutMs).catch(() => undefined);
        after = await inspect(repo.path, path, req.branch, timeoutMs);
        if (nothingThere(after)) return fail(db, claim, 'transient', 'git_worktree_race', message, gitRows(req, after));
      }
      if (nothingThere(after)) {
        const code = isLockContention(err) ? 'git_lock_contention' : 'git_failed';
        return fail(db, claim, 'transient', code, message, gitRows(req, after));
      }
      return fail(db, claim, 'ambiguous', 'git_failed', message, gitRows(req, after));
    }
    const made = linkedGitDir(path);
    if (made === null || made.markerText !== null) {
      const g = await inspect(repo.path, path, req.branch, timeoutMs);
      return fail(db, claim, 'ambiguous', 'worktree_mismatch', 'the new worktree is not as created', gitRows(req, g));
    }
    writeMarkerFile(made.gitDir, marker);
  } else if (!(before.registered && before.markerText === marker)) {
    return fail(
      db,
      claim,
      'ambiguous',
      'foreign_worktree',
      "the path or branch exists without this step's marker",
      gitRows(req, before),
    );
  }
  await heartbeat();
  // The proof the record rests on: registered here, on the branch, HEAD and branch at the base commit, this
  // step's marker. Read from the worktree itself; when that read is not exact, the full inspection decides
  // and is the failure's evidence.
  const linked = await inspectLinkedWorktree(repo.path, path, req.branch, timeoutMs);
  const g =
    linked !== null && exact(linked, req, marker) ? linked : await inspect(repo.path, path, req.branch, timeoutMs);
  if (!exact(g, req, marker)) {
    return fail(
      db,
      claim,
      'ambiguous',
      'worktree_mismatch',
      'the worktree is not on the branch at the base commit',
      gitRows(req, g),
    );
  }
  await failpoint('after_effect_before_record', {
    kind: claim.kind,
    operationId: claim.operationId,
    stepId: claim.stepId,
  });
  const proof = { worktree_path: path, head_commit: g.head! };
  // In the batch that goes on with the operation when the worker offers one (ADR 0041), else on its own.
  const outcome = record ? await record(freshBranchRecord(claim, proof)) : await recordFreshBranch(db, claim, proof);
  return outcome.state;
}

async function observe(deps: Parameters<StepHandler['observe']>[0], step: StepRow): Promise<Observation> {
  const req = stepRequestOf(step, 'fresh_branch_prepare');
  const owner = ownerOf(step);
  const conflict = (reason: string, rows: ObservedRow[]): Observation => ({
    effect: 'conflict',
    evidence: rowSetEvidenceOf(step, 'conflict', reason, rows),
  });
  const repo = await repositoryOf(deps.db, req);
  const path = repo && plannedWorktreePath(deps.dataDir, req, repo.name);
  if (!repo || !path) return conflict('the planned worktree path cannot be derived', gitRows(req, null));
  const rows = await readFreshBranchRows(deps.db, step, path);
  const set = (g: GitState | null) => gitRows(req, g, rows);
  if (!(await isGitRepository(repo.path, deps.timeoutMs))) {
    const gone = rows.envRepo === 'absent' && !pathExists(path);
    return gone
      ? {
          effect: 'absent_proven',
          evidence: rowSetEvidenceOf(step, 'absent_proven', 'repository and worktree are gone', set(null)),
        }
      : conflict('the repository is gone but worktree traces remain', set(null));
  }
  const g = await inspect(repo.path, path, req.branch, deps.timeoutMs);
  if (rows.envRepo === 'ours' && rows.marker === 'ours' && exact(g, req, markerFileText(req, owner))) {
    return { effect: 'present_exact', evidence: presentEvidenceOf(step, freshBranchObservation(req, owner, path)) };
  }
  if (rows.envRepo === 'absent' && rows.marker === 'ours' && exact(g, req, markerFileText(req, owner))) {
    // The worker died after its Git effect and before its record: the worktree carries this step's
    // authenticated marker, so it is ours, but the ledger's effect rows were never written. Recovery removes
    // such a worktree first while it is untouched (removeUnrecordedWorktree); one still here is not clean
    // (an operator's resolution observes without that removal). The recorded effect is absent; a retry's
    // perform adopts the marked worktree and records it (never a second `worktree add`), so `retry_wait`
    // is the one safe resolution.
    return {
      effect: 'absent_proven',
      evidence: rowSetEvidenceOf(
        step,
        'absent_proven',
        "the worktree carries this step's marker but was never recorded; a retry adopts it",
        set(g),
      ),
    };
  }
  if (rows.envRepo === 'absent' && nothingThere(g)) {
    return {
      effect: 'absent_proven',
      evidence: rowSetEvidenceOf(step, 'absent_proven', 'no worktree, branch or row exists', set(g)),
    };
  }
  return conflict('worktree, branch or rows are partial, changed or foreign', set(g));
}

/**
 * Recovery of an `unknown` step whose worker died (or outlived its lease) after `git worktree add` and before
 * its record: the worktree carries this step's marker, but no ledger row owns it. Observed as it is, it is
 * "absent" (a retry would adopt it) — and orphaned if the operation aborts before any retry does. So, like an
 * attachment claim's unrecorded copies, it is removed here first, and only while untouched (registered on the
 * branch, HEAD and branch at the base commit, clean, this step's marker byte-equal): `git worktree remove`
 * without --force, the branch deleted only while at the base commit. Anything else is left to the observation
 * (a changed worktree is a conflict for an operator). Runs under the operation's recovery claim, before
 * `observe`; the step stays `unknown` meanwhile, so no worker can claim it.
 */
async function removeUnrecordedWorktree(deps: Parameters<StepHandler['observe']>[0], step: StepRow): Promise<void> {
  if (step.state !== 'unknown') return;
  const req = stepRequestOf(step, 'fresh_branch_prepare');
  const repo = await repositoryOf(deps.db, req);
  const path = repo && plannedWorktreePath(deps.dataDir, req, repo.name);
  if (!repo || !path) return;
  const rows = await readFreshBranchRows(deps.db, step, path);
  if (rows.envRepo !== 'absent' || rows.marker !== 'ours') return;
  const seen = await inspectForUndo(repo.path, path, req.branch, deps.timeoutMs);
  if (!isUntouched(seen, req.branch, req.base_commit, markerFileText(req, ownerOf(step)))) return;
  await removeUntouchedWorktree(repo.path, path, req.branch, req.base_commit, deps.timeoutMs);
  deps.log.info(
    { operation_id: step.operation_id, step_id: step.id, worktree: path },
    "an unknown step's unrecorded worktree was removed (untouched, this step's marker)",
  );
}

export const freshBranchPrepareHandler: StepHandler<'fresh_branch_prepare'> = {
  kind: 'fresh_branch_prepare',
  perform,
  markerWithClaim: worktreeMarkerWithClaim,
  observe,
  removeUnrecorded: removeUnrecordedWorktree,
};
