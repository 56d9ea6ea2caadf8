/**
 * The two ledger transactions around `fresh_branch_prepare`'s Git work
 * (src/kinds/fresh-branch-prepare/step.ts runs Git between them, outside any
 * transaction), the database half of its observation, and Complete's
 * verifier.
 *
 * PersistWorktreeMarker — locks workspace 1, operation 4.2, task 5.2,
 * identity 6, steps 7 (`lockClaimedLocked`), the resource marker (14, FOR
 * UPDATE). Requires a live claim (the CAS predicate, read-only); inserts the
 * `task_resource_markers` row (kind `worktree`, owned by the step) unless this
 * step's exact marker is already there. The step stays `running`; a foreign
 * marker row makes it `unknown` (`conflict`) before any Git mutation.
 *
 * RecordFreshBranch — same prefix, then the task environment (11.1,
 * shared), the environment-repo row (11.2, FOR UPDATE), the marker (14,
 * shared). Inserts `task_environment_repos` (planned id, worktree path,
 * branch, base commit, owned by the step) and records `running -> succeeded`
 * with the complete Git proof and `ownership_marker` = the marker hash. A
 * foreign row, a missing marker or a missing environment leaves the Git work
 * in place and makes the step `unknown` (`conflict`).
 * No event in either.
 *
 * `worktreeMarkerWithClaim` writes the same marker row in the ledger batch
 * that claims the step with itself (the marker's lock taken with the batch's
 * union, ADR 0040); `failDroppingMarker` deletes it again with a failure
 * found before any Git mutation.
 *
 * Round trips (ADR 0040, 0041): PersistWorktreeMarker is three — the guard;
 * the claim's liveness fence with the marker's lock, which reads the row; the
 * INSERT with COMMIT. RecordFreshBranch is four — the guard; the locks, which
 * read the rows checked next, with the one read no lock answers; the INSERT
 * with its read-back and the record; COMMIT once the read-back is checked. In
 * the batch its record opens, the read-back travels with what follows it.
 */
import { sameJson } from '../../canonical/canonical-json';
import type { FreshBranchPrepareRequest } from '../../canonical/types';
import { TIER } from '../../db/lock-plan';
import { runTransaction, type Db, type Tx } from '../../db/tx';
import type { MarkerWithClaim } from '../contract';
import type { HeldRecord } from '../../store/ledger-apply';
import { recordHeldAlone } from '../../store/held-record';
import { worktreePathMatches } from '../../plan/fresh-branch';
import { expectClaimLiveLocked, lockClaimedLocked } from '../../store/claimed';
import type { StepClaim, StepRow } from '../../store/types';
import {
  effectMismatch,
  failWithRowsLocked,
  ownerOf,
  presentEvidenceOf,
  recordSuccessLocked,
  requestOf,
  resourceMarkerSha256,
  stepRequestOf,
  type EffectOutcome,
  type EffectOwner,
  type ObservedRow,
} from '../../store/effects/recording';
import {
  readEnvironment,
  readEnvironmentRepo,
  ENV_REPO_COLUMNS,
  ENVIRONMENT_COLUMNS,
  MARKER_COLUMNS,
  markerInsert,
  readMarker,
  rowHash,
  sameRow,
  type EnvironmentRepoDoc,
  type MarkerDoc,
} from '../../store/effects/row-documents';
import {
  dbReader,
  EFFECT_ROW_UNIQUES,
  takeLocks,
  txReader,
  type LockNeed,
  type Reader,
} from '../../store/effects/row-locks';

type Req = FreshBranchPrepareRequest;
export type RowPresence = 'absent' | 'ours' | 'foreign';

/** What the Git phase proved: the registered worktree at the planned path, on the branch, at the base. */
export interface FreshBranchProof {
  worktree_path: string;
  head_commit: string;
}

export function expectedMarker(req: Req, owner: EffectOwner): MarkerDoc {
  return {
    resource_key: req.resource_key,
    workspace_id: req.workspace_id,
    task_id: req.task_id,
    ...owner,
    kind: 'worktree',
    marker_sha256: resourceMarkerSha256(owner.operation_id, owner.step_id, req.resource_key),
  };
}

export function expectedEnvironmentRepo(req: Req, owner: EffectOwner, worktreePath: string): EnvironmentRepoDoc {
  return {
    id: req.task_environment_repo_id,
    environment_id: req.task_environment_id,
    workspace_id: req.workspace_id,
    repository_id: req.repository_id,
    worktree_path: worktreePath,
    branch: req.branch,
    base_commit: req.base_commit,
    ...owner,
  };
}

const presence = (actual: unknown, expected: unknown): RowPresence =>
  actual === null ? 'absent' : sameRow(actual, expected) ? 'ours' : 'foreign';

export interface FreshBranchRows {
  envRepo: RowPresence;
  envRepoDoc: EnvironmentRepoDoc | null;
  marker: RowPresence;
  environmentOk: boolean;
}

async function readFreshRows(
  read: Reader,
  req: Req,
  owner: EffectOwner,
  worktreePath: string,
): Promise<FreshBranchRows> {
  // Independent reads, issued together: in a transaction they travel in one round trip (Tx.batch).
  const [envRepoDoc, twin, marker, env] = await Promise.all([
    readEnvironmentRepo(read, req.task_environment_repo_id),
    // The (environment, repository) pair is unique: another row for it is in the way too.
    read<{ id: string }>(
      'SELECT id FROM task_environment_repos WHERE environment_id = ? AND repository_id = ? AND id <> ?',
      [req.task_environment_id, req.repository_id, req.task_environment_repo_id],
    ),
    readMarker(read, req.resource_key),
    readEnvironment(read, req.task_environment_id),
  ]);
  return {
    envRepo: twin.length > 0 ? 'foreign' : presence(envRepoDoc, expectedEnvironmentRepo(req, owner, worktreePath)),
    envRepoDoc,
    marker: presence(marker, expectedMarker(req, owner)),
    environmentOk:
      env !== null && env.kind === 'task' && env.task_id === req.task_id && env.workspace_id === req.workspace_id,
  };
}

export function freshBranchRowSet(req: Req, rows: FreshBranchRows | null): ObservedRow[] {
  return [
    {
      table: 'task_environment_repos',
      key: req.task_environment_repo_id,
      row_sha256: rows?.envRepoDoc ? rowHash(rows.envRepoDoc) : null,
    },
    { table: 'git_worktrees', key: req.resource_key, row_sha256: null },
  ];
}

/** The success observation; every field re-derives from the request, owner and worktree path. */
export function freshBranchObservation(req: Req, owner: EffectOwner, worktreePath: string) {
  const marker = expectedMarker(req, owner);
  return {
    worktree_path: worktreePath,
    canonical_path_sha256: req.canonical_path_sha256,
    branch: req.branch,
    head_commit: req.base_commit,
    base_commit: req.base_commit,
    registered: true,
    marker: {
      operation_id: owner.operation_id,
      step_id: owner.step_id,
      resource_key: req.resource_key,
      marker_sha256: marker.marker_sha256,
    },
    environment_repo_row_sha256: rowHash(expectedEnvironmentRepo(req, owner, worktreePath)),
  };
}

function markerLock(req: Req, mode: 'update' | 'share', reads?: string): LockNeed {
  return {
    tier: TIER.MARKER,
    table: 'task_resource_markers',
    key: req.resource_key,
    where: 'resource_key = ?',
    params: [req.resource_key],
    mode,
    ...(reads === undefined ? {} : { reads }),
  };
}

/** `reading`: the locks read the rows `readFreshRows` reads next, which are answered from them (ADR 0032). */
function rowLocks(req: Req, exclusive: boolean, reading = false): LockNeed[] {
  const reads = (columns: string) => (reading ? { reads: columns } : {});
  return [
    {
      tier: TIER.ENVIRONMENT,
      table: 'task_environments',
      key: req.task_environment_id,
      where: 'id = ?',
      params: [req.task_environment_id],
      mode: 'share',
      ...reads(ENVIRONMENT_COLUMNS),
    },
    {
      tier: TIER.ENVIRONMENT_REPO,
      table: 'task_environment_repos',
      key: req.task_environment_repo_id,
      where: 'id = ?',
      params: [req.task_environment_repo_id],
      mode: exclusive ? 'update' : 'share',
      ...reads(ENV_REPO_COLUMNS),
    },
    markerLock(req, 'share', reading ? MARKER_COLUMNS : undefined),
  ];
}

/** Claims whose marker row the ledger batch that claimed them wrote (`worktreeMarkerWithClaim`). */
const markedWithClaim = new WeakSet<StepClaim>();

/** The step's repository row, as the batch that claimed it read it (null: no such row). */
export interface RepositoryRow {
  path: string;
  name: string;
}
const REPOSITORY_READ = 'SELECT path, name FROM repositories WHERE id = ? AND workspace_id = ?';
const repositoryReadWithClaim = new WeakMap<StepClaim, RepositoryRow | null>();

/** The repository row (`path`, `name`) of the step's request, read now. */
export async function readRepository(read: Reader, req: Req): Promise<RepositoryRow | null> {
  const rows = await read<RepositoryRow>(REPOSITORY_READ, [req.repository_id, req.workspace_id]);
  return rows[0] ?? null;
}

/**
 * The worktree's ownership marker written by the ledger batch that claims the step with itself (ADR 0040), under
 * the marker's lock from the batch's up-front union: read with that lock (issued before the batch writes, so the
 * lock's read answers it), inserted when absent (the claim is then marked, and `perform` skips
 * `persistWorktreeMarker`); a foreign marker is left for `persistWorktreeMarker` to record `unknown` as before.
 * The repository row `perform` reads first travels with the locks too, and is kept for it (ADR 0041). A batch
 * that rolls back leaves its claims unused.
 */
export const worktreeMarkerWithClaim: MarkerWithClaim = {
  locks: (step) => [markerLock(stepRequestOf(step, 'fresh_branch_prepare'), 'update', MARKER_COLUMNS)],
  read(tx, step) {
    const req = stepRequestOf(step, 'fresh_branch_prepare');
    const reader = txReader(tx);
    const found = readMarker(reader, req.resource_key);
    const repository = readRepository(reader, req);
    // Awaited only if the batch claims the step: a batch that fails before then must not leave them unhandled.
    found.catch(() => undefined);
    repository.catch(() => undefined);
    return async (claim) => {
      const want = expectedMarker(req, ownerOf(claim));
      const p = presence(await found, want);
      repositoryReadWithClaim.set(claim, await repository);
      if (p === 'foreign') return;
      if (p === 'absent')
        tx.expect(markerInsert(tx, want), 1, () => new Error('internal: the marker was not inserted'));
      markedWithClaim.add(claim);
    };
  },
};

/**
 * The repository row the batch that claimed this step read with its claim (`worktreeMarkerWithClaim`), once;
 * undefined when it read none (a claim of its own), and `perform` reads it itself.
 */
export function repositoryReadWith(claim: StepClaim): RepositoryRow | null | undefined {
  const row = repositoryReadWithClaim.get(claim);
  repositoryReadWithClaim.delete(claim);
  return row;
}

/** The batch that claimed this step wrote its marker row with the claim (`worktreeMarkerWithClaim`). */
export const markerWrittenWithClaim = (claim: StepClaim): boolean => markedWithClaim.has(claim);

/**
 * A permanent failure found before any Git mutation by a step whose marker was written with its claim: the marker row,
 * still this step's, is deleted in the failure's transaction, so that the step ends as one whose preflight failed
 * before its marker was written (nothing of it left; the evidence says absent).
 */
export async function failDroppingMarker(
  db: Db,
  claim: StepClaim,
  code: string,
  message: string,
  rows: ObservedRow[],
): Promise<EffectOutcome> {
  const req = requestOf(claim, 'fresh_branch_prepare');
  const want = expectedMarker(req, ownerOf(claim));
  return runTransaction(db, 'FailFreshBranchBeforeGit', async (tx) => {
    const ctx = await lockClaimedLocked(tx, claim);
    await takeLocks(tx, [markerLock(req, 'update', MARKER_COLUMNS)]);
    if (presence(await readMarker(txReader(tx), req.resource_key), want) === 'ours') {
      tx.expect(
        {
          sql: 'DELETE FROM task_resource_markers WHERE resource_key = ? AND step_id = ?',
          params: [req.resource_key, claim.stepId],
        },
        1,
        () => new Error('internal: the marker was not deleted'),
      );
    }
    return failWithRowsLocked(tx, ctx, claim, 'permanent', code, message, rows);
  });
}

export async function persistWorktreeMarker(db: Db, claim: StepClaim): Promise<'persisted' | EffectOutcome> {
  const req = requestOf(claim, 'fresh_branch_prepare');
  const want = expectedMarker(req, ownerOf(claim));
  return runTransaction(
    db,
    'PersistWorktreeMarker',
    async (tx) => {
      const ctx = await lockClaimedLocked(tx, claim);
      // The liveness fence, the marker's lock and its read travel in one round trip (ADR 0040).
      expectClaimLiveLocked(tx, claim);
      await takeLocks(tx, [markerLock(req, 'update', MARKER_COLUMNS)]);
      const found = await readMarker(txReader(tx), req.resource_key);
      const p = presence(found, want);
      if (p === 'foreign') {
        const rows = [{ table: 'task_resource_markers', key: req.resource_key, row_sha256: rowHash(found) }];
        return failWithRowsLocked(
          tx,
          ctx,
          claim,
          'ambiguous',
          'foreign_marker',
          'the resource key is marked by another owner',
          rows,
        );
      }
      if (p === 'absent') {
        // Sent with COMMIT: its only failure, a concurrent marker's primary key, restarts the transaction.
        void tx.commitWith([markerInsert(tx, want)]);
      }
      return 'persisted';
    },
    { restartOnUnique: EFFECT_ROW_UNIQUES },
  );
}

/**
 * RecordFreshBranch's work under its locks (`HeldRecord`): in its own transaction (`recordFreshBranch`), or opening
 * the ledger batch that goes on with the operation (store/ledger-step.ts `recordAndApplyLedgerSteps`, ADR 0041). Its
 * locks read the rows it checks; the one read no lock answers (the twin) travels with them.
 */
export function freshBranchRecord(claim: StepClaim, proof: FreshBranchProof): HeldRecord {
  const req = requestOf(claim, 'fresh_branch_prepare');
  const owner = ownerOf(claim);
  if (!worktreePathMatches(proof.worktree_path, req) || proof.head_commit !== req.base_commit) {
    throw new Error('recordFreshBranch: the proof is not for this request (path or HEAD differs)');
  }
  const want = expectedEnvironmentRepo(req, owner, proof.worktree_path);
  return {
    name: 'RecordFreshBranch',
    locks: rowLocks(req, true, true),
    async record(tx, ctx) {
      const read = txReader(tx);
      const rows = await readFreshRows(read, req, owner, proof.worktree_path);
      const set = freshBranchRowSet(req, rows);
      if (rows.envRepo === 'foreign') {
        return failWithRowsLocked(
          tx,
          ctx,
          claim,
          'ambiguous',
          'foreign_row',
          'the environment-repo row is held by someone else',
          set,
        );
      }
      if (rows.marker !== 'ours') {
        return failWithRowsLocked(
          tx,
          ctx,
          claim,
          'ambiguous',
          'marker_missing',
          "the step's ownership marker row is not in place",
          set,
        );
      }
      if (!rows.environmentOk) {
        return failWithRowsLocked(
          tx,
          ctx,
          claim,
          'ambiguous',
          'environment_missing',
          'the task environment is gone',
          set,
        );
      }
      if (rows.envRepo === 'absent') {
        // Not waited for: it travels with the read-back below, which sees it (the runner checks it inserted one row).
        tx.expect(
          {
            sql: `INSERT INTO task_environment_repos (id, environment_id, workspace_id, repository_id, worktree_path, branch, base_commit, operation_id, step_id, created_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ${tx.now})`,
            params: [
              want.id,
              want.environment_id,
              want.workspace_id,
              want.repository_id,
              want.worktree_path,
              want.branch,
              want.base_commit,
              want.operation_id,
              want.step_id,
            ],
          },
          1,
          () => new Error('internal: the environment-repo row was not inserted'),
        );
      }
      // The read-back without waiting (as the ledger kinds' records, Tx.checkLater): it travels with the record
      // and whatever the transaction issues next, and is checked before COMMIT — rows that do not read back
      // exactly roll the whole transaction back.
      tx.checkLater(
        readFreshRows(read, req, owner, proof.worktree_path).then((after) => {
          if (after.envRepo !== 'ours') throw new Error('environment-repo row did not read back exactly');
        }),
      );
      const evidence = presentEvidenceOf(claim, freshBranchObservation(req, owner, proof.worktree_path));
      return recordSuccessLocked(tx, ctx, claim, evidence, {
        ownershipMarker: expectedMarker(req, owner).marker_sha256,
      });
    },
  };
}

export async function recordFreshBranch(db: Db, claim: StepClaim, proof: FreshBranchProof): Promise<EffectOutcome> {
  return recordHeldAlone(db, claim, freshBranchRecord(claim, proof));
}

/** Read-only, database half of the observation (the caller inspects Git). */
export async function readFreshBranchRows(db: Db, step: StepRow, worktreePath: string): Promise<FreshBranchRows> {
  return readFreshRows(dbReader(db), stepRequestOf(step, 'fresh_branch_prepare'), ownerOf(step), worktreePath);
}

export function freshBranchLocks(step: StepRow): LockNeed[] {
  return rowLocks(stepRequestOf(step, 'fresh_branch_prepare'), false);
}

/** Complete: rows only (Git is I/O and never runs under SQL locks). */
export async function verifyFreshBranchLocked(
  tx: Tx,
  step: StepRow,
  evidence: { observation: Record<string, unknown> },
): Promise<void> {
  const req = stepRequestOf(step, 'fresh_branch_prepare');
  const owner = ownerOf(step);
  await takeLocks(tx, freshBranchLocks(step));
  const path = (evidence.observation as { worktree_path?: unknown }).worktree_path;
  if (typeof path !== 'string' || !worktreePathMatches(path, req)) {
    throw effectMismatch(step, 'evidence names a worktree path other than the planned one');
  }
  const rows = await readFreshRows(txReader(tx), req, owner, path);
  if (rows.envRepo !== 'ours')
    throw effectMismatch(
      step,
      `the environment-repo row is ${rows.envRepo === 'absent' ? 'missing' : 'not the recorded row'}`,
    );
  if (rows.marker !== 'ours') throw effectMismatch(step, 'the ownership marker row is missing or foreign');
  if (!sameJson(freshBranchObservation(req, owner, path), evidence.observation)) {
    throw effectMismatch(step, 'evidence does not repeat the Git proof and row hash byte-exactly');
  }
}
