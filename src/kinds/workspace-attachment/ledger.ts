/**
 * ApplyWorkspaceAttachment: the `workspace_attachment` effect and its
 * success, in one transaction (so the rows exist exactly when the step is
 * `succeeded`); plus its read-only observation and Complete's verifier.
 *
 * Locks, in order: workspace 1, operation 4.2, task 5.2, identity 6, steps 7
 * (`lockClaimedLocked`); environment binding of the task (11.1, FOR UPDATE)
 * and the bound shared environment (11.1, shared); that environment's
 * repository rows (11.2, shared, ascending id); the group (12.1, shared);
 * the task's blocker edges then group-member rows (12.2, FOR UPDATE,
 * ascending key). Blocker *tasks* are tier 5, already passed: they are checked
 * with a plain read (exist, same workspace, not deleted) and not re-checked —
 * a blocker deleted concurrently is the deletion's to unlink.
 * States: step `running -> succeeded`; or, when the world is not what the
 * request says, `failed` (group, environment or blocker gone: nothing was
 * written, `absent_proven`) or `unknown` (a foreign row in the way, or the
 * environment's repositories changed: `conflict`).
 * Rows written: one `workspace_group_members` row (role `member`) per member
 * ID, one `task_blockers` edge per blocker ID, the `task_environment_bindings`
 * row — each owned by `(operation_id, step_id)`. No event.
 */
import { sameJson } from '../../canonical/canonical-json';
import { runTransaction, type Db, type Statement, type Tx } from '../../db/tx';
import { lockClaimedLocked, type ClaimContext } from '../../store/claimed';
import type { StepClaim, StepRow } from '../../store/types';
import {
  effectMismatch,
  failWithRowsLocked,
  observedRowsOf,
  ownerOf,
  presentEvidenceOf,
  recordSuccessLocked,
  requestOf,
  rowSetEvidenceOf,
  stepRequestOf,
  type EffectObservation,
  type EffectOutcome,
} from '../../store/effects/recording';
import {
  BINDING_COLUMNS,
  BLOCKER_COLUMNS,
  GROUP_MEMBER_COLUMNS,
  readEnvironmentRepos,
  rowHash,
} from '../../store/effects/row-documents';
import {
  dbReader,
  EFFECT_ROW_UNIQUES,
  firstReadsOf,
  insertAnswering,
  takeLocks,
  txReader,
  type LockNeed,
} from '../../store/effects/row-locks';
import {
  envReposMatch,
  expectedAttachmentRows,
  lockNeeds,
  observationOf,
  ownRows,
  readWorld,
  referenceProblem,
  type Expected,
  type World,
} from './rows';

export { expectedAttachmentRows } from './rows';

/**
 * Issues every missing insert at once (no await in between), so the reads issued next follow them in one round trip;
 * where the server answers `INSERT ... RETURNING`, each insert answers its row's read-back (ADR 0051).
 */
function insertMissing(tx: Tx, exp: Expected, w: World): Promise<number[]> {
  const now = tx.now;
  const writes: Promise<number>[] = [];
  for (const [i, b] of exp.blockers.entries()) {
    if (w.blockers[i]) continue;
    writes.push(
      insertAnswering(
        tx,
        {
          sql: `INSERT INTO task_blockers (task_id, blocker_task_id, workspace_id, operation_id, step_id, created_at) VALUES (?, ?, ?, ?, ?, ${now})`,
          params: [b.task_id, b.blocker_task_id, b.workspace_id, b.operation_id, b.step_id],
        },
        {
          table: 'task_blockers',
          columns: BLOCKER_COLUMNS,
          where: 'task_id = ? AND blocker_task_id = ?',
          params: [b.task_id, b.blocker_task_id],
        },
      ),
    );
  }
  for (const [i, m] of exp.members.entries()) {
    if (w.members[i]) continue;
    writes.push(
      insertAnswering(
        tx,
        {
          sql: `INSERT INTO workspace_group_members (group_id, task_id, workspace_id, role, operation_id, step_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ${now})`,
          params: [m.group_id, m.task_id, m.workspace_id, m.role, m.operation_id, m.step_id],
        },
        {
          table: 'workspace_group_members',
          columns: GROUP_MEMBER_COLUMNS,
          where: 'group_id = ? AND task_id = ?',
          params: [m.group_id, m.task_id],
        },
      ),
    );
  }
  if (exp.binding !== null && w.binding === null) {
    const e = exp.binding;
    writes.push(
      insertAnswering(
        tx,
        {
          sql: `INSERT INTO task_environment_bindings (task_id, environment_id, workspace_id, operation_id, step_id, created_at) VALUES (?, ?, ?, ?, ?, ${now})`,
          params: [e.task_id, e.environment_id, e.workspace_id, e.operation_id, e.step_id],
        },
        { table: 'task_environment_bindings', columns: BINDING_COLUMNS, where: 'task_id = ?', params: [e.task_id] },
      ),
    );
  }
  return Promise.all(writes);
}

export async function applyWorkspaceAttachment(db: Db, claim: StepClaim): Promise<EffectOutcome> {
  return runTransaction(db, 'ApplyWorkspaceAttachment', (tx) => applyWorkspaceAttachmentLocked(tx, claim), {
    restartOnUnique: EFFECT_ROW_UNIQUES,
  });
}

/**
 * The effect and its record inside the caller's transaction (which holds no lock above tier 7);
 * `claimed`: the context of a claim made earlier in the same transaction (nothing is re-read).
 */
export async function applyWorkspaceAttachmentLocked(
  tx: Tx,
  claim: StepClaim,
  claimed?: ClaimContext,
): Promise<EffectOutcome> {
  const req = requestOf(claim, 'workspace_attachment');
  const owner = ownerOf(claim);
  const exp = expectedAttachmentRows(req, owner);
  const ctx = claimed ?? (await lockClaimedLocked(tx, claim));
  const read = txReader(tx);
  const envRepoIds =
    req.environment_id === null ? [] : (await readEnvironmentRepos(read, req.environment_id)).map((r) => r.id);
  // Locks first, then the reads, in one round trip (Tx.batch keeps issue order).
  const [, w] = await Promise.all([takeLocks(tx, lockNeeds(req, envRepoIds, exp, true)), readWorld(read, req, exp)]);
  const own = ownRows(exp, w);
  if (own.some((r) => r.p === 'foreign')) {
    return failWithRowsLocked(
      tx,
      ctx,
      claim,
      'ambiguous',
      'foreign_row',
      'a row the attachment needs is held by someone else',
      observedRowsOf(own),
    );
  }
  const problem = referenceProblem(req, w);
  if (problem !== null) {
    const cls = own.every((r) => r.p === 'absent') ? 'permanent' : 'ambiguous';
    return failWithRowsLocked(tx, ctx, claim, cls, problem.code, problem.message, [
      ...problem.rows,
      ...observedRowsOf(own),
    ]);
  }
  if (!envReposMatch(req, w)) {
    const rows = w.envRepos.map((r) => ({ table: 'task_environment_repos', key: r.id, row_sha256: rowHash(r) }));
    return failWithRowsLocked(
      tx,
      ctx,
      claim,
      'ambiguous',
      'environment_changed',
      "the environment's repositories differ from the plan",
      rows,
    );
  }
  // The inserts and the read-back, in that order, without waiting: they travel with the record and whatever the
  // transaction issues next, and the read-back is checked before COMMIT (Tx.checkLater). The evidence is the
  // world read under the locks with this step's rows in place; the check proves the rows read back exactly so
  // and the rest of that world unchanged.
  const observation = observationOf(req, owner, claim.generation, exp, w);
  tx.checkLater(
    Promise.all([insertMissing(tx, exp, w), readWorld(read, req, exp)]).then(([, after]) => {
      const exact =
        ownRows(exp, after).every((r) => r.p === 'ours') &&
        sameJson(observationOf(req, owner, claim.generation, exp, after), observation);
      if (!exact) throw new Error('workspace attachment rows did not read back exactly');
    }),
  );
  return recordSuccessLocked(tx, ctx, claim, presentEvidenceOf(claim, observation));
}

/** Read-only: exact rows and references -> present; every own row absent -> absent; else conflict. */
export async function observeWorkspaceAttachment(db: Db, step: StepRow): Promise<EffectObservation> {
  const req = stepRequestOf(step, 'workspace_attachment');
  const owner = ownerOf(step);
  const exp = expectedAttachmentRows(req, owner);
  const w = await readWorld(dbReader(db), req, exp);
  const own = ownRows(exp, w);
  if (own.every((r) => r.p === 'ours') && referenceProblem(req, w) === null && envReposMatch(req, w)) {
    return {
      effect: 'present_exact',
      evidence: presentEvidenceOf(step, observationOf(req, owner, step.generation, exp, w)),
    };
  }
  const rows = observedRowsOf(own);
  if (own.every((r) => r.p === 'absent')) {
    return {
      effect: 'absent_proven',
      evidence: rowSetEvidenceOf(step, 'absent_proven', 'no attachment row exists', rows),
    };
  }
  return {
    effect: 'conflict',
    evidence: rowSetEvidenceOf(step, 'conflict', 'attachment rows are partial or foreign', rows),
  };
}

interface AttachmentObservation {
  policy_mode: string;
  environment_repo_rows: { id: string }[];
  owner_operation_id: string;
  step_generation: number;
}

export function workspaceAttachmentLocks(
  step: StepRow,
  evidence: { observation: Record<string, unknown> },
): LockNeed[] {
  const req = stepRequestOf(step, 'workspace_attachment');
  const obs = evidence.observation as unknown as AttachmentObservation;
  const ids = (obs.environment_repo_rows ?? []).map((r) => r.id);
  return lockNeeds(req, ids, expectedAttachmentRows(req, ownerOf(step)), false);
}

/** Complete: the rows re-derived from the request exist byte-exactly and the evidence repeats their hashes. */
export async function verifyWorkspaceAttachmentLocked(
  tx: Tx,
  step: StepRow,
  evidence: { observation: Record<string, unknown> },
): Promise<void> {
  const req = stepRequestOf(step, 'workspace_attachment');
  const owner = ownerOf(step);
  const exp = expectedAttachmentRows(req, owner);
  const [, w] = await Promise.all([
    takeLocks(tx, workspaceAttachmentLocks(step, evidence)),
    readWorld(txReader(tx), req, exp),
  ]);
  const bad = ownRows(exp, w).find((r) => r.p !== 'ours');
  if (bad)
    throw effectMismatch(step, `${bad.table} ${bad.key} is ${bad.p === 'absent' ? 'missing' : 'not the recorded row'}`);
  if (!w.groupOk) throw effectMismatch(step, 'the workspace group is gone');
  if (!envReposMatch(req, w)) throw effectMismatch(step, "the environment's repositories changed");
  const obs = evidence.observation as unknown as AttachmentObservation;
  const want = observationOf(req, owner, obs.step_generation, exp, w);
  if (!sameJson(want, evidence.observation)) {
    throw effectMismatch(step, 'evidence does not repeat the effect rows byte-exactly');
  }
  if (obs.owner_operation_id !== step.operation_id || obs.step_generation > step.generation) {
    throw effectMismatch(step, 'evidence names another owner or a future generation');
  }
}

/**
 * The rows `applyWorkspaceAttachmentLocked` will lock for this step (tiers
 * 11.1–12.2), for a batch that takes every step's locks first, in one global
 * order (store/ledger-step.ts). One plain read: the environment's repositories.
 */
/**
 * The reads `applyWorkspaceAttachmentLocked` makes first, from the step row alone (ADR 0026): the environment's
 * repositories (when it has an environment) and then its world, which reads them again.
 */
export function workspaceAttachmentApplyReads(step: StepRow): Statement[] {
  const req = stepRequestOf(step, 'workspace_attachment');
  const exp = expectedAttachmentRows(req, ownerOf(step));
  return firstReadsOf((read) =>
    Promise.all([
      req.environment_id === null ? null : readEnvironmentRepos(read, req.environment_id),
      readWorld(read, req, exp),
    ]),
  );
}

export async function workspaceAttachmentApplyLocks(tx: Tx, step: StepRow): Promise<LockNeed[]> {
  const req = stepRequestOf(step, 'workspace_attachment');
  const envRepoIds =
    req.environment_id === null ? [] : (await readEnvironmentRepos(txReader(tx), req.environment_id)).map((r) => r.id);
  return lockNeeds(req, envRepoIds, expectedAttachmentRows(req, ownerOf(step)), true);
}
