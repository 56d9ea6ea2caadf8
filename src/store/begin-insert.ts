/**
 * BeginTaskCreation's single transaction: the only code that inserts `tasks`.
 *
 * Locks, in global order: workspace 1 (FOR SHARE) -> actor authority 1.5 ->
 * workflow step 2 (FOR SHARE) -> active membership barriers 4.1 -> creation
 * operation 4.2 (inserted) -> external-ID key 5.1 -> task keys/rows 5.2 (new
 * task key, parent and blockers in UUID order) -> retained identity 6.
 * Writes (only on Created): operation, live task (`creation_state=preparing`;
 * `awaits_blockers` when some blocker is not yet done under its 5.2 lock),
 * identity, task repositories, task environment, one step row per plan step.
 * Found external ID or reused identity: the transaction rolls back, nothing is
 * written. No event is written here; `task.created` belongs to Complete.
 * A plan built from remembered context (ADR 0052) adds one plain read (no
 * lock), first in the transaction's first round trip; when it fails, nothing
 * is written and `StaleContext` sends Begin back to fresh reads.
 */
import {
  ACTOR_DOMAIN,
  hashedDocument,
  idempotencyKey,
  PLAN_DOMAIN,
  STEP_REQUEST_DOMAIN,
  type HashedDocument,
} from '../canonical/hash';
import type { ActorBindingDocument } from '../canonical/types';
import { ConflictError, TaskLedgerError } from '../domain/errors';
import type { BeginOutcome } from '../domain/vocab';
import { TIER } from '../db/lock-plan';
import { readRows, runTransaction, type Db, type SqlParam, type Statement, type Tx } from '../db/tx';
import type { StatementResult } from '../db/batch';
import { forceIndexSql, RestartCommand } from '../db/dialect';
import { planBlockerIds } from '../plan/blockers';
import type { BuiltPlan } from '../plan/build-plan';
import { fenceAuthorityLocked, lockAuthorityLocked } from './actor';
import { externalIdKeyDigest, taskKeyDigest } from './lock-keys';
import { findByExternalIdLocked, isSettled, TASK_VIEW_COLUMNS, toTaskView, type TaskViewRow } from './task-view';
import type { PlannedStep, TaskView } from './types';
import { settledValue } from './settled';

export interface InsertInput {
  operationId: string;
  built: BuiltPlan;
  actor: ActorBindingDocument;
  externalId: string | null;
  completionTokenSha256: string;
  newId: () => string;
  /**
   * A plan built from remembered context (ADR 0052, begin-context-cache.ts): the fence that checks what the
   * transaction's own fences do not. When it fails, `StaleContext` is thrown instead of starting over: the plan
   * itself may be wrong, so Begin builds it again from fresh reads.
   */
  contextFence?: Statement;
}

/** A fence of a remembered context failed (ADR 0052): nothing was written; Begin starts over from fresh reads. */
export class StaleContext extends Error {
  constructor() {
    super('Begin: a remembered context no longer holds');
    this.name = 'StaleContext';
  }
}

const staleContext = () => new StaleContext();

/**
 * The operation row's plan and actor documents, each canonicalized once for both its stored text and its hash (the
 * ManifestHash and ActorBindingHash are the hashes of exactly the texts stored beside them).
 */
interface BoundDocuments {
  plan: HashedDocument;
  actor: HashedDocument;
}

export type InsertResult =
  | { kind: 'created'; manifestHash: string; actorBindingHash: string; task: TaskView; steps: PlannedStep[] }
  | { kind: 'found'; task: TaskView; outcome: BeginOutcome }
  | { kind: 'identity_reused' };

/**
 * What the transaction's body answers: a created task's view arrives once COMMIT has (`commitWith`'s own promise,
 * whose rejection is handled: an attempt that restarts or fails drops it unread).
 */
type Attempt =
  | Exclude<InsertResult, { kind: 'created' }>
  | (Omit<Extract<InsertResult, { kind: 'created' }>, 'task'> & { committed: Promise<StatementResult | undefined> })
  | { kind: 'committed_earlier' };

/** One multi-row INSERT, or null for no rows. */
function insertStatement(
  tx: Tx,
  table: string,
  columns: string[],
  rows: SqlParam[][],
  nowColumns: string[] = [],
): Statement | null {
  if (rows.length === 0) return null;
  const cols = [...columns, ...nowColumns].join(', ');
  const one = `(${[...columns.map(() => '?'), ...nowColumns.map(() => tx.now)].join(', ')})`;
  return { sql: `INSERT INTO ${table} (${cols}) VALUES ${rows.map(() => one).join(', ')}`, params: rows.flat() };
}

async function insertRows(...args: Parameters<typeof insertStatement>): Promise<void> {
  const stmt = insertStatement(...args);
  if (stmt) await args[0].exec(stmt.sql, [...stmt.params]);
}

/**
 * Locks the task tier (5.2) in UUID order and checks parent and blockers.
 * Returns whether the task awaits its blockers: some blocker is not yet done
 * under this lock, so a later transition of it can resolve the task
 * (`tasks.awaits_blockers`, store/task-done.ts).
 */
async function lockTaskTierLocked(tx: Tx, input: InsertInput): Promise<boolean> {
  const { plan } = input.built;
  const blockers = new Set(planBlockerIds(plan));
  let awaitsBlockers = false;
  const existing = [...new Set([...(plan.parent_id ? [plan.parent_id] : []), ...blockers])];
  const all = [...new Set([plan.task_id, ...existing])].sort();
  for (const id of all) {
    if (id === plan.task_id) {
      // The new task's row does not exist yet: lock its identity key.
      await tx.lockKey(TIER.TASK, taskKeyDigest(id), `tasks:${id}`);
      continue;
    }
    tx.lockRow(TIER.TASK, 'tasks', id);
    const row = await tx.one<{ lifecycle_state: string; workspace_id: string; creation_state: string }>(
      `SELECT lifecycle_state, workspace_id, creation_state FROM tasks WHERE id = ? ${tx.forShare}`,
      [id],
    );
    // Parents and blockers must be settled (created, not deleted) under their lock: an unsettled one may abort.
    if (
      !row ||
      row.workspace_id !== plan.workspace_id ||
      row.lifecycle_state === 'deleted' ||
      row.creation_state !== 'completed'
    ) {
      const field = id === plan.parent_id ? '/parent_id' : '/blocked_by';
      throw new TaskLedgerError('invalid_request', `${field}: task ${id} no longer exists in this workspace`, {
        field,
      });
    }
    if (blockers.has(id) && row.lifecycle_state !== 'done') awaitsBlockers = true;
  }
  return awaitsBlockers;
}

/** Tier 4.2: the creation operation's row. */
function insertOperationRow(tx: Tx, input: InsertInput, docs: BoundDocuments): Promise<void> {
  const { plan } = input.built;
  tx.lockOperationRow('task_creation_operations', input.operationId);
  return insertRows(
    tx,
    'task_creation_operations',
    [
      'id',
      'workspace_id',
      'task_id',
      'state',
      'plan_json',
      'manifest_hash',
      'actor_json',
      'actor_binding_hash',
      'completion_token_sha256',
      'start_policy',
    ],
    [
      [
        input.operationId,
        plan.workspace_id,
        plan.task_id,
        'preparing',
        docs.plan.text,
        docs.plan.sha256,
        docs.actor.text,
        docs.actor.sha256,
        input.completionTokenSha256,
        plan.start_policy,
      ],
    ],
    ['created_at', 'updated_at'],
  );
}

/**
 * Begin's common case (no external ID, no parent or blockers: the task tier is the new task's one-statement key
 * lock, on both dialects since ADR 0023): the operation row (4.2), that key (5.2) and the identity lock (6), issued
 * together in tier order; answers the identity row, if one exists.
 */
function newTaskRowsLocked(tx: Tx, input: InsertInput, docs: BoundDocuments): Promise<unknown> {
  const { plan } = input.built;
  const opInsert = insertOperationRow(tx, input, docs);
  const key = tx.lockKey(TIER.TASK, taskKeyDigest(plan.task_id), `tasks:${plan.task_id}`);
  tx.lockRow(TIER.IDENTITY, 'task_identities', plan.task_id);
  const identityRead = tx.one('SELECT state FROM task_identities WHERE task_id = ? FOR UPDATE', [plan.task_id]);
  return Promise.all([opInsert, key, identityRead]).then(([, , identity]) => identity);
}

export async function insertCreation(db: Db, input: InsertInput): Promise<InsertResult> {
  const { plan } = input.built;
  const docs: BoundDocuments = {
    plan: hashedDocument(PLAN_DOMAIN, plan),
    actor: hashedDocument(ACTOR_DOMAIN, input.actor),
  };
  // Only the first attempt checks its fences on the server and commits in one round trip (ADR 0028).
  const commonCase = input.externalId === null && taskTierIsNewKeyOnly(input);
  let oneRoundTrip = commonCase;
  const res = await runTransaction<Attempt>(
    db,
    'BeginTaskCreation',
    async (tx) => {
      if (oneRoundTrip) {
        // A fence that fails starts it over on the checked path below, which gives the precise refusal.
        oneRoundTrip = false;
        return commonCaseInOneRoundTrip(tx, input, docs);
      }
      // A later attempt of the common case may follow a connection lost during the first one's COMMIT
      // (`retryLostCommit`): its operation row, a fresh ID no one else writes, says whether that COMMIT took. A
      // COMMIT still in flight is waited for by the insert of the same row below (a unique violation restarts
      // this, and the read then finds it).
      if (commonCase) {
        const own = await tx.one('SELECT id FROM task_creation_operations WHERE id = ?', [input.operationId]);
        if (own) {
          tx.rollbackOnly();
          return { kind: 'committed_earlier' };
        }
      }
      // Tiers 1 (the workspace fence, shared: creations run in parallel; deletion takes it exclusively), 1.5 (the
      // actor's authority), 2 (the placement's admission row) and 4.1 (archive / deletion membership barriers
      // covering this workspace): issued together in lock order, one round trip (Tx.batch), then checked in that
      // order, so the refusal is the one the first failing check gives.
      // A plan from remembered context (ADR 0052) has its fence read first, in the same round trip (a plain read).
      const fence = input.contextFence;
      const contextRead = fence ? tx.rows(fence.sql, [...fence.params]) : Promise.resolve([{}]);
      tx.lockRow(TIER.WORKSPACE, 'workspaces', plan.workspace_id);
      const wsRead = tx.one<{ state: string }>(`SELECT state FROM workspaces WHERE id = ? ${tx.forShare}`, [
        plan.workspace_id,
      ]);
      const authority = lockAuthorityLocked(tx, input.actor, 'not_authorized');
      let stepRead: Promise<unknown> = Promise.resolve(true);
      if (plan.workflow_step_id !== null) {
        tx.lockRow(TIER.WORKFLOW, 'workflow_steps', plan.workflow_step_id);
        stepRead = tx.one(`SELECT id FROM workflow_steps WHERE id = ? AND workspace_id = ? ${tx.forShare}`, [
          plan.workflow_step_id,
          plan.workspace_id,
        ]);
      }
      const fenced = barriersStatement(tx, plan.workspace_id);
      const barriersRead = tx.rows<{ operation_id: string }>(fenced.sql, [...fenced.params]);
      const common = input.externalId === null && taskTierIsNewKeyOnly(input);
      const [context, ws, authorized, step, barriers] = await Promise.allSettled([
        contextRead,
        wsRead,
        authority,
        stepRead,
        barriersRead,
      ]);
      // A remembered fact that no longer holds: the plan may be wrong, whatever else holds (Begin reads afresh).
      if (settledValue(context).length !== 1) throw staleContext();
      // A workspace being deleted answers as one that does not exist (its deletion committed after authorize()).
      const wsRow = settledValue(ws);
      if (!wsRow || wsRow.state !== 'active') throw new TaskLedgerError('not_authorized', 'task not created', {});
      settledValue(authorized);
      if (!settledValue(step)) {
        throw new TaskLedgerError('invalid_request', '/workflow_step_id: workflow step no longer exists', {
          field: '/workflow_step_id',
        });
      }
      // Any active barrier refuses the creation (the rows stay locked, shared, until the rollback).
      const fences = settledValue(barriers);
      if (fences.length > 0) {
        throw new ConflictError('creation_state_conflict', 'workspace is fenced by an archive or deletion operation', {
          workspace_id: plan.workspace_id,
        });
      }

      // The common case (here after its one-round-trip attempt failed a fence) sends its operation row, task key
      // and identity lock in one round trip (Tx.batch keeps the tier order; the server runs them in that order and
      // stops at the first error).
      if (common) {
        const identity = await newTaskRowsLocked(tx, input, docs);
        if (identity) {
          tx.rollbackOnly();
          return { kind: 'identity_reused' };
        }
        return insertCreationRowsLocked(tx, input, docs, false);
      }
      await insertOperationRow(tx, input, docs);

      // Tier 5.1: the external-ID key, then the exact re-check under it.
      if (input.externalId !== null) {
        await tx.lockKey(TIER.EXTERNAL_ID_KEY, externalIdKeyDigest(plan.workspace_id, input.externalId));
        const found = await findByExternalIdLocked(tx, plan.workspace_id, input.externalId);
        if (found) {
          tx.rollbackOnly();
          return {
            kind: 'found',
            task: found,
            outcome: isSettled(found.creation_state) ? 'FoundSettled' : 'FoundUnsettled',
          };
        }
      }

      // Tier 5.2 and 6: task keys, then the retained identity.
      const awaitsBlockers = await lockTaskTierLocked(tx, input);
      tx.lockRow(TIER.IDENTITY, 'task_identities', plan.task_id);
      const identity = await tx.one('SELECT state FROM task_identities WHERE task_id = ? FOR UPDATE', [plan.task_id]);
      if (identity) {
        tx.rollbackOnly();
        return { kind: 'identity_reused' };
      }
      return insertCreationRowsLocked(tx, input, docs, awaitsBlockers);
    },
    {
      restartOnUnique: [
        'uq_tasks_workspace_external_id',
        // The operation row a lost COMMIT wrote after all (MySQL names every primary key PRIMARY; in Begin only
        // that row's can collide: the task's ID is fenced by its identity, every other key is new).
        ...(commonCase ? ['pk_task_creation_operations', 'PRIMARY'] : []),
      ],
      retryLostCommit: commonCase,
    },
  );
  if (res.kind === 'committed_earlier') return createdEarlier(db, input, docs);
  if (res.kind !== 'created') return res;
  const { committed, ...created } = res;
  return { ...created, task: createdView(input.built.plan.task_id, await committed) };
}

/** The answer of an attempt whose COMMIT took though its connection was lost: read back, as it was written. */
async function createdEarlier(db: Db, input: InsertInput, docs: BoundDocuments): Promise<InsertResult> {
  const { plan } = input.built;
  const [views, rows] = await Promise.all([
    readRows<TaskViewRow>(db, `SELECT ${TASK_VIEW_COLUMNS} FROM tasks WHERE id = ?`, [plan.task_id]),
    readRows<{ id: string; kind: string; step_key: string }>(
      db,
      'SELECT id, kind, step_key FROM task_creation_steps WHERE operation_id = ?',
      [input.operationId],
    ),
  ]);
  const byKey = new Map(rows.map((r) => [`${r.kind}\u0000${r.step_key}`, r.id]));
  const steps: PlannedStep[] = plan.steps.map((s) => {
    const id = byKey.get(`${s.kind}\u0000${s.step_key}`);
    if (id === undefined) throw new Error(`internal: step ${s.kind}/${s.step_key} of ${input.operationId} is missing`);
    return { id, kind: s.kind, step_key: s.step_key };
  });
  if (!views[0]) throw new Error(`internal: task ${plan.task_id} of ${input.operationId} is missing`);
  return {
    kind: 'created',
    manifestHash: docs.plan.sha256,
    actorBindingHash: docs.actor.sha256,
    task: toTaskView(views[0]),
    steps,
  };
}

/** Why Begin's one-round-trip attempt did not commit: it starts over, and the checks above answer precisely. */
const fenceFailed = () => new RestartCommand('Begin: a fence checked on the server failed');

/**
 * Begin's common case (no external ID, no parent or blockers) in one round trip (ADR 0028): every lock and fence
 * of the checked path, in the same tier order, as statements the server checks — the workspace active (1), the
 * actor's authority current (1.5), the workflow step in the workspace (2), no active membership barrier (4.1) —
 * then the operation row (4.2), the task key (5.2), no retained identity (6), the inserts, the new task's view
 * and COMMIT, nothing awaited. A fence that fails stops the round trip before COMMIT; the transaction rolls back
 * and starts over on the checked path, whose checks give the precise refusal.
 */
function commonCaseInOneRoundTrip(tx: Tx, input: InsertInput, docs: BoundDocuments): Attempt {
  const { plan } = input.built;
  // A plan from remembered context (ADR 0052): its own fence failing means the plan may be wrong, so Begin builds
  // it again from fresh reads; any other fence restarts on the checked path, which checks this one first.
  if (input.contextFence) tx.expect(input.contextFence, 1, staleContext);
  tx.lockRow(TIER.WORKSPACE, 'workspaces', plan.workspace_id);
  tx.expect(
    { sql: `SELECT id FROM workspaces WHERE id = ? AND state = 'active' ${tx.forShare}`, params: [plan.workspace_id] },
    1,
    fenceFailed,
  );
  fenceAuthorityLocked(tx, input.actor, fenceFailed);
  if (plan.workflow_step_id !== null) {
    tx.lockRow(TIER.WORKFLOW, 'workflow_steps', plan.workflow_step_id);
    tx.expect(
      {
        sql: `SELECT id FROM workflow_steps WHERE id = ? AND workspace_id = ? ${tx.forShare}`,
        params: [plan.workflow_step_id, plan.workspace_id],
      },
      1,
      fenceFailed,
    );
  }
  tx.expect(barriersStatement(tx, plan.workspace_id), 0, fenceFailed);
  insertOperationRow(tx, input, docs).catch(() => undefined);
  tx.lockKey(TIER.TASK, taskKeyDigest(plan.task_id), `tasks:${plan.task_id}`).catch(() => undefined);
  tx.lockRow(TIER.IDENTITY, 'task_identities', plan.task_id);
  tx.expect(
    { sql: 'SELECT state FROM task_identities WHERE task_id = ? FOR UPDATE', params: [plan.task_id] },
    0,
    fenceFailed,
  );
  return insertCreationRowsLocked(tx, input, docs, false);
}

/** The active archive / deletion membership barriers covering a workspace (tier 4.1, FOR SHARE). */
function barriersStatement(tx: Tx, workspaceId: string): Statement {
  return {
    sql: `SELECT operation_id FROM archive_membership_barriers ${forceIndexSql(tx.dialect, 'ix_archive_membership_barriers_scope_state')}
          WHERE scope_workspace_id = ? AND state = 'active' ORDER BY operation_id ${tx.forShare}`,
    params: [workspaceId],
  };
}

/** True when the task tier holds only the new task's key: no parent, no blockers. */
function taskTierIsNewKeyOnly(input: InsertInput): boolean {
  const { plan } = input.built;
  return !plan.parent_id && planBlockerIds(plan).length === 0;
}

/** Begin's inserts, once every key (tiers 1 to 6) is held; returns the new task's view. */
function insertCreationRowsLocked(tx: Tx, input: InsertInput, docs: BoundDocuments, awaitsBlockers: boolean): Attempt {
  const { plan, rows } = input.built;
  const steps: PlannedStep[] = plan.steps.map((s) => ({ id: input.newId(), kind: s.kind, step_key: s.step_key }));
  // Inserts (all keys above are held).
  const t = rows.tasks;
  // Sent with COMMIT, in this order, with the view of the new task (below): one round trip (Tx.commitWith); a unique
  // violation stops the rest and rolls everything back (an external ID taken meanwhile restarts Begin).
  const statements = [
    insertStatement(
      tx,
      'tasks',
      [
        'id',
        'workspace_id',
        'workflow_id',
        'workflow_step_id',
        'parent_id',
        'title',
        'description',
        'creation_state',
        'lifecycle_state',
        'lifecycle_generation',
        'start_policy',
        'wip_admitted',
        'external_id',
        'creation_operation_id',
        'revision',
        'awaits_blockers',
      ],
      [
        [
          t.id,
          t.workspace_id,
          t.workflow_id,
          t.workflow_step_id,
          t.parent_id,
          t.title,
          t.description,
          'preparing',
          'live',
          1,
          t.start_policy,
          false,
          input.externalId,
          input.operationId,
          0,
          awaitsBlockers,
        ],
      ],
      ['created_at', 'updated_at'],
    ),
    insertStatement(
      tx,
      'task_identities',
      ['task_id', 'workspace_id', 'operation_id', 'state'],
      [[rows.task_identities.task_id, rows.task_identities.workspace_id, input.operationId, 'preparing']],
      ['created_at', 'updated_at'],
    ),
    insertStatement(
      tx,
      'task_repositories',
      ['task_id', 'repository_id', 'workspace_id', 'position', 'base_branch', 'fresh_branch'],
      rows.task_repositories.map((r) => [
        r.task_id,
        r.repository_id,
        r.workspace_id,
        r.position,
        r.base_branch,
        r.fresh_branch,
      ]),
      ['created_at'],
    ),
    insertStatement(
      tx,
      'task_environments',
      ['id', 'workspace_id', 'task_id', 'kind', 'operation_id'],
      rows.task_environments.map((e) => [e.id, e.workspace_id, e.task_id, e.kind, input.operationId]),
      ['created_at'],
    ),
    insertStatement(
      tx,
      'task_creation_steps',
      [
        'id',
        'operation_id',
        'task_id',
        'workspace_id',
        'kind',
        'step_key',
        'request_json',
        'request_sha256',
        'idempotency_key',
        'state',
      ],
      plan.steps.map((s, i) => {
        const request = hashedDocument(STEP_REQUEST_DOMAIN, s.request);
        const requestSha = request.sha256;
        return [
          steps[i]!.id,
          input.operationId,
          plan.task_id,
          plan.workspace_id,
          s.kind,
          s.step_key,
          request.text,
          requestSha,
          idempotencyKey(input.operationId, s.kind, s.step_key, requestSha),
          'planned',
        ];
      }),
      ['created_at', 'updated_at'],
    ),
  ].filter((x): x is Statement => x !== null);
  // The new task's view: returned by the task's insert where the server answers INSERT ... RETURNING (ADR 0051),
  // else read after the inserts, closing the list.
  const fromInsert = tx.insertReturning;
  const taskInsert = statements[0]!;
  if (fromInsert) statements[0] = { ...taskInsert, sql: `${taskInsert.sql} RETURNING ${TASK_VIEW_COLUMNS}` };
  const results = tx.commitWith(
    fromInsert
      ? statements
      : [...statements, { sql: `SELECT ${TASK_VIEW_COLUMNS} FROM tasks WHERE id = ?`, params: [plan.task_id] }],
  );
  const committed = results.then((r) => r[fromInsert ? 0 : r.length - 1]);
  // Handled here as `commitWith`'s own promise is: a transaction that does not commit never asks for it.
  committed.catch(() => undefined);
  return { kind: 'created', manifestHash: docs.plan.sha256, actorBindingHash: docs.actor.sha256, committed, steps };
}

/** The new task's view, as the transaction that inserted it answered it (`insertCreationRowsLocked`). */
function createdView(taskId: string, result: StatementResult | undefined): TaskView {
  const row = result?.rows[0] as TaskViewRow | undefined;
  if (!row) throw new Error(`task ${taskId} is not readable in the transaction that inserted it`);
  return toTaskView(row);
}
