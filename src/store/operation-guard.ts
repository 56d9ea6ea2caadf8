/**
 * Locks an operation's prefix of the global order and proves the caller may
 * drive it. Used by every Store method after Begin; never begins a
 * transaction itself (`...Locked` helpers run inside the caller's).
 *
 * Locks: workspace (1, FOR SHARE), actor authority (1.5, handle path only),
 * creation operation (4.2, FOR UPDATE). Then it recomputes all three bindings:
 * ManifestHash from the stored plan bytes, ActorBindingHash from the stored
 * actor document, and (handle path) the completion token against its stored
 * SHA-256 in constant time. Any mismatch: typed conflict, zero writes.
 */
import { parseCanonical } from '../canonical/canonical-json';
import { ACTOR_DOMAIN, canonicalTextHash, PLAN_DOMAIN } from '../canonical/hash';
import { completionTokenMatches } from '../canonical/completion-token';
import type { ActorBindingDocument, CreationPlan } from '../canonical/types';
import { validateActorBinding, validateCreationPlan } from '../canonical/validate';
import { ConflictError, TaskLedgerError } from '../domain/errors';
import type { OperationState, StartPolicy } from '../domain/vocab';
import { TIER } from '../db/lock-plan';
import { bool, type Tx } from '../db/tx';
import { RestartCommand } from '../db/dialect';
import { lockAuthorityLocked } from './actor';
import { deepFreeze, MEMO_CAPACITY, VerifiedMemo } from './binding-cache';
import { externalIdKeyDigest } from './lock-keys';
import { stepsLockStatement } from './step-rows';
import { IDENTITY_GUARD_READ, IDENTITY_ROW_READ, TASK_GUARD_READ, TASK_ROW_READ } from './task-row-reads';
import type { Dialect } from '../db/config';
import type { Statement } from '../db/batch';
import type { OperationAuthority } from './types';

export interface OperationRow {
  id: string;
  workspace_id: string;
  task_id: string;
  state: OperationState;
  plan_json: string;
  manifest_hash: string;
  actor_json: string;
  actor_binding_hash: string;
  completion_token_sha256: string;
  start_policy: StartPolicy;
  generation: number;
  /** The release that last claimed this creation (external_id_releases.id), and that claim's generation. */
  release_operation_id: string | null;
  release_generation: number;
  release_applied: boolean;
  result_outcome: string | null;
  result_revision: number | null;
  result_event_id: string | null;
  abort_cause: string | null;
}

export interface GuardedOperation {
  op: OperationRow;
  plan: CreationPlan;
  actor: ActorBindingDocument;
  /** The workspace's state under its lock (`active`, `deleting`, `deleted`). */
  workspaceState: string;
  /**
   * The task is known to hold no external ID (seen with none once: an external ID is only ever set by Begin and
   * only ever cleared afterwards), so its chain needs no external-ID key lock and no read to decide that.
   */
  externalIdAbsent: boolean;
  /** `GuardOptions.guessed` went with the first round trip, after the steps' lock (the whole chain went ahead). */
  guessSent: boolean;
}

export interface GuardOptions {
  /**
   * A workflow step whose admission lock (tier 2, FOR UPDATE) goes between the
   * workspace and the operation (WIP admission at launch, store/wip-admission.ts).
   */
  admissionStepId?: string;
  /**
   * Plain reads of the caller's (given the operation's task ID) sent in the guard's first round trip, after the
   * task chain's statements (only when the whole chain goes ahead: `externalIdKey: false`). The caller issues
   * them, in this order, right after `lockTaskChainLocked` and before `lockStepsLocked`, and they are answered
   * from there (`Tx.batchAhead`).
   */
  aheadReads?: (taskId: string) => Statement[];
  /**
   * Statements guessed to come right after the steps' lock (Complete's verification over the step rows this process
   * committed, ADR 0021): sent in the guard's round trip when the whole chain (task, identity, steps) goes ahead and
   * no `aheadReads` do. The caller then locks the chain without `steps` (`lockTaskChainLocked`), the steps next,
   * and issues what it guessed; anything else first restarts the command (`Tx.batchAhead`).
   */
  guessed?: readonly Statement[];
}

/** Every operation column a guard or a reader (verify) needs. */
export const OP_COLUMNS =
  'id, workspace_id, task_id, state, plan_json, manifest_hash, actor_json, actor_binding_hash, completion_token_sha256, start_policy, generation, release_operation_id, release_generation, release_applied, result_outcome, result_revision, result_event_id, abort_cause';

/** Driver values to their types (MySQL booleans, bigint strings). */
export function normalizeOp(row: OperationRow): OperationRow {
  return {
    ...row,
    generation: Number(row.generation),
    release_generation: Number(row.release_generation),
    release_applied: bool(row.release_applied),
    result_revision: row.result_revision === null ? null : Number(row.result_revision),
  };
}

function operationIdOf(auth: OperationAuthority): string {
  return auth.kind === 'handle' ? auth.handle.operationId : auth.operationId;
}

const bindingMemo = new VerifiedMemo<{ plan: CreationPlan; actor: ActorBindingDocument }>();

/**
 * Re-derives both stored bindings from their bytes; a tampered row cannot
 * pass. Memoised per operation on every input byte (binding-cache.ts): a hit
 * needs the identical plan, actor, hashes, task and workspace.
 */
export function verifyStoredBindings(op: OperationRow): { plan: CreationPlan; actor: ActorBindingDocument } {
  return bindingMemo.get(
    op.id,
    [op.plan_json, op.actor_json, op.manifest_hash, op.actor_binding_hash, op.task_id, op.workspace_id],
    () => deriveStoredBindings(op),
  );
}

function deriveStoredBindings(op: OperationRow): { plan: CreationPlan; actor: ActorBindingDocument } {
  let plan: CreationPlan;
  let actor: ActorBindingDocument;
  try {
    plan = validateCreationPlan(parseCanonical(op.plan_json));
    actor = validateActorBinding(parseCanonical(op.actor_json));
  } catch (err) {
    throw new ConflictError('handle_mismatch', 'stored plan or actor document is not valid', {
      operation_id: op.id,
      cause: (err as Error).message,
    });
  }
  // Both texts were just accepted as their documents' RFC 8785 form (parseCanonical): each hashes as its document.
  if (canonicalTextHash(PLAN_DOMAIN, op.plan_json) !== op.manifest_hash) {
    throw new ConflictError('handle_mismatch', 'stored plan does not hash to the stored ManifestHash', {
      operation_id: op.id,
    });
  }
  if (canonicalTextHash(ACTOR_DOMAIN, op.actor_json) !== op.actor_binding_hash) {
    throw new ConflictError('handle_mismatch', 'stored actor document does not hash to the stored ActorBindingHash', {
      operation_id: op.id,
    });
  }
  if (plan.task_id !== op.task_id || plan.workspace_id !== op.workspace_id || actor.workspace_id !== op.workspace_id) {
    throw new ConflictError('handle_mismatch', 'stored plan or actor is bound to another task or workspace', {
      operation_id: op.id,
    });
  }
  return { plan, actor };
}

interface OperationPeek {
  workspace_id: string;
  task_id: string;
  actor_json: string;
  /** The parsed, closed-schema-valid actor document, or null when the stored bytes are not one. */
  actor: ActorBindingDocument | null;
  /** The task row existed without an external ID when peeked; that never changes back (see GuardedOperation). */
  externalIdAbsent: boolean;
  /** The plan as this process last verified it under the operation's lock (for `ChainAhead.ownTaskOnly`). */
  plan?: CreationPlan;
  /**
   * From a wake-up's hint (`hintOperation`), not yet checked under a lock: no actor (the handle path reads), and the
   * guard restarts the command when the locked rows contradict it.
   */
  hinted?: boolean;
}

/** One entry per operation this process touched recently, holding its verified plan once a guard has read it. */
const peekMemo = new Map<string, OperationPeek>();

/** Operations the peek memo holds now (for tests and diagnostics). */
export function peekMemoSize(): number {
  return peekMemo.size;
}

/**
 * What the process that ran Begin knew of a new operation, sent with its first
 * wake-ups (ADR 0020): the first guard of this process takes its locks by it
 * instead of reading first, and checks it under those locks — the operation
 * row's workspace and task (here), the task row's external ID
 * (`lockTaskChainLocked`). A contradiction restarts the command with a read
 * (`RestartCommand`): a wrong hint costs a restart, never a lock kept.
 */
export function hintOperation(
  operationId: string,
  hint: { workspaceId: string; taskId: string; externalId: boolean },
): void {
  if (peekMemo.has(operationId)) return;
  peekMemo.set(operationId, {
    workspace_id: hint.workspaceId,
    task_id: hint.taskId,
    actor_json: '',
    actor: null,
    externalIdAbsent: !hint.externalId,
    hinted: true,
  });
  if (peekMemo.size > MEMO_CAPACITY) peekMemo.delete(peekMemo.keys().next().value as string);
}

/**
 * The operation's workspace and actor document, read before any lock to learn
 * which workspace and authority to lock first. Both columns are immutable
 * after Begin, so a process remembers them; the locked read below re-checks
 * them byte for byte, so a remembered value can never stand in for a changed row.
 */
async function peekOperation(
  tx: Tx,
  operationId: string,
  /** A hint will do (an operation authority: no authority lock needs the actor before the operation's). */
  hintDoes: boolean,
): Promise<OperationPeek | undefined> {
  const known = peekMemo.get(operationId);
  if (known !== undefined && (hintDoes || !known.hinted)) return known;
  const row = await tx.one<{ workspace_id: string; task_id: string; actor_json: string; no_external_id: unknown }>(
    `SELECT o.workspace_id, o.task_id, o.actor_json,
            CASE WHEN t.id IS NOT NULL AND t.external_id IS NULL THEN 1 ELSE 0 END AS no_external_id
       FROM task_creation_operations o LEFT JOIN tasks t ON t.id = o.task_id WHERE o.id = ?`,
    [operationId],
  );
  if (!row) return undefined;
  let actor: ActorBindingDocument | null;
  try {
    actor = deepFreeze(validateActorBinding(parseCanonical(row.actor_json)));
  } catch {
    actor = null;
  }
  const peek: OperationPeek = {
    workspace_id: row.workspace_id,
    task_id: row.task_id,
    actor_json: row.actor_json,
    actor,
    externalIdAbsent: Number(row.no_external_id) === 1,
  };
  peekMemo.set(operationId, peek);
  if (peekMemo.size > MEMO_CAPACITY) peekMemo.delete(peekMemo.keys().next().value as string);
  return peek;
}

/**
 * The plan this process last verified for the operation under its lock, if
 * any: a hint only (plans never change after Begin, and every guard
 * re-verifies the stored bytes), for callers that must choose a lock before
 * they can read (the launch claim's admission lock).
 */
export function rememberedPlan(operationId: string): CreationPlan | undefined {
  return peekMemo.get(operationId)?.plan;
}

/**
 * What the caller locks right after the guard, so the guard can send it in
 * the same round trip (`Tx.batchAhead`): the task chain (`lockTaskChainLocked`
 * with the same `externalIdKey`) and, with `steps`, the operation's steps
 * (`lockStepsLocked`). With `externalIdKey` only the external-ID read goes
 * ahead (its key lock, 5.1, must come before the task row), unless the task is
 * known to hold none (`externalIdAbsent`, which the caller then passes on).
 */
export interface ChainAhead {
  externalIdKey: boolean;
  steps: boolean;
  /**
   * The caller's `lockTaskChainLocked` locks no task row but the operation's own (no blockers, no heads): with a
   * task known to hold no external ID, the whole chain can then go ahead.
   */
  ownTaskOnly?: boolean | ((plan: CreationPlan) => boolean);
  /** The caller goes on to check Begin's rows and passes `planned` on: the task's lock reads their columns too. */
  planned?: boolean;
}

const EXTERNAL_ID_PEEK = 'SELECT external_id FROM tasks WHERE id = ?';
// A chain that goes on to check Begin's rows locks with the columns that check reads, and answers it (ADR 0034,
// store/task-row-reads.ts); any other locks with the guard's columns only.
const TASK_LOCK = `${TASK_GUARD_READ} FOR UPDATE`;
const IDENTITY_LOCK = `${IDENTITY_GUARD_READ} FOR UPDATE`;
const PLANNED_TASK_LOCK = `${TASK_ROW_READ} FOR UPDATE`;
const PLANNED_IDENTITY_LOCK = `${IDENTITY_ROW_READ} FOR UPDATE`;

/** The chain's own task and identity locks: with `planned`, they read (and answer) the check of Begin's rows too. */
function chainLocks(planned: boolean | undefined, taskId: string): [Statement, Statement] {
  return [
    { sql: planned === true ? PLANNED_TASK_LOCK : TASK_LOCK, params: [taskId] },
    { sql: planned === true ? PLANNED_IDENTITY_LOCK : IDENTITY_LOCK, params: [taskId] },
  ];
}

/**
 * Whether the caller locks its own task row only. A function of the plan is asked about the plan this process last
 * verified for the operation (plans never change after Begin; the guard re-verifies the stored bytes below), and
 * answers no while there is none.
 */
function ownTaskOnly(ahead: ChainAhead, peek: OperationPeek): boolean {
  const own = ahead.ownTaskOnly;
  if (typeof own === 'function') return peek.plan !== undefined && own(peek.plan);
  return own === true;
}

function chainStatements(
  operationId: string,
  taskId: string,
  ahead: ChainAhead,
  peek: OperationPeek,
  dialect: Dialect,
): Statement[] {
  if (ahead.externalIdKey && !(peek.externalIdAbsent && ownTaskOnly(ahead, peek))) {
    return [{ sql: EXTERNAL_ID_PEEK, params: [taskId] }];
  }
  return [...chainLocks(ahead.planned, taskId), ...(ahead.steps ? [stepsLockStatement(operationId, dialect)] : [])];
}

/**
 * Locks workspace (1), authority (1.5) and operation (4.2) and validates the
 * authority. Returns the locked operation with its verified plan and actor.
 * With `ahead`, the statements the caller runs next travel in the same round
 * trip (see `ChainAhead`); the caller must run them next, in that order.
 */
export async function guardOperationLocked(
  tx: Tx,
  auth: OperationAuthority,
  ahead?: ChainAhead,
  options: GuardOptions = {},
): Promise<GuardedOperation> {
  const operationId = operationIdOf(auth);
  const peek = await peekOperation(tx, operationId, auth.kind !== 'handle');
  if (!peek) {
    if (auth.kind === 'handle') {
      throw new ConflictError('handle_mismatch', 'no creation operation matches this handle', {
        operation_id: operationId,
      });
    }
    throw new TaskLedgerError('not_found', `creation operation ${operationId} does not exist`, {
      operation_id: operationId,
    });
  }
  if (auth.kind === 'handle' && auth.handle.workspaceId !== peek.workspace_id) {
    throw new ConflictError('handle_mismatch', 'handle names another workspace', { operation_id: operationId });
  }

  const wsLock: Statement = {
    sql: `SELECT state FROM workspaces WHERE id = ? ${tx.forShare}`,
    params: [peek.workspace_id],
  };
  const fence = auth.kind === 'operation' ? auth.recovery : undefined;
  const fenceColumns = fence
    ? `, recovery_generation, recovery_owner, CASE WHEN recovery_lease_expires_at > ${tx.now} THEN 1 ELSE 0 END AS recovery_live`
    : '';
  const opLock: Statement = {
    sql: `SELECT ${OP_COLUMNS}${fenceColumns} FROM task_creation_operations WHERE id = ? FOR UPDATE`,
    params: [operationId],
  };
  const chain = ahead ? chainStatements(operationId, peek.task_id, ahead, peek, tx.dialect) : [];
  const reads = ahead && !ahead.externalIdKey && options.aheadReads ? options.aheadReads(peek.task_id) : [];
  const next = [...chain, ...reads];
  const chainWithSteps = chain.length > 0 && chain[0]!.sql !== EXTERNAL_ID_PEEK && ahead!.steps;
  const guessed = chainWithSteps && reads.length === 0 ? (options.guessed ?? []) : [];
  const stepLock: Statement[] =
    options.admissionStepId === undefined
      ? []
      : [{ sql: 'SELECT id FROM workflow_steps WHERE id = ? FOR UPDATE', params: [options.admissionStepId] }];
  // Without an authority lock between them, workspace, admission step and operation go in one round trip with
  // what follows.
  const together = auth.kind !== 'handle';
  tx.lockRow(TIER.WORKSPACE, 'workspaces', peek.workspace_id);
  if (together) {
    if (options.admissionStepId !== undefined) tx.lockRow(TIER.WORKFLOW, 'workflow_steps', options.admissionStepId);
    tx.lockOperationRow('task_creation_operations', operationId);
  }
  const first = await tx.batchAhead(
    together ? [wsLock, ...stepLock, opLock] : [wsLock],
    together ? next : [],
    together ? guessed : [],
  );
  const ws = first[0]?.rows[0] as { state: string } | undefined;
  if (!ws && peek.hinted) {
    // The wake-up's hint named a workspace that does not exist: start over with a read.
    peekMemo.delete(operationId);
    throw new RestartCommand(`operation ${operationId}: its wake-up's hint names no workspace`);
  }
  if (!ws) {
    throw new ConflictError('creation_state_conflict', 'the workspace of this operation no longer exists', {
      operation_id: operationId,
    });
  }
  if (auth.kind === 'handle') {
    if (peek.actor === null) {
      throw new ConflictError('handle_mismatch', 'stored actor document is not valid', { operation_id: operationId });
    }
    await lockAuthorityLocked(tx, peek.actor, 'handle_mismatch');
  }
  if (!together && options.admissionStepId !== undefined) {
    tx.lockRow(TIER.WORKFLOW, 'workflow_steps', options.admissionStepId);
    await tx.batch(stepLock);
  }

  let raw: OperationRow | undefined;
  if (together) {
    raw = first[stepLock.length + 1]?.rows[0] as OperationRow | undefined;
  } else {
    tx.lockOperationRow('task_creation_operations', operationId);
    const [opResult] = await tx.batchAhead([opLock], next, guessed);
    raw = opResult?.rows[0] as OperationRow | undefined;
  }
  if (!raw) {
    peekMemo.delete(operationId);
    if (auth.kind === 'handle') {
      throw new ConflictError('handle_mismatch', 'no creation operation matches this handle', {
        operation_id: operationId,
      });
    }
    throw new TaskLedgerError('not_found', `creation operation ${operationId} does not exist`, {});
  }
  if (fence) checkRecoveryFence(raw as unknown as Record<string, unknown>, operationId, fence);
  const op = normalizeOp(raw);
  if (peek.hinted && (op.workspace_id !== peek.workspace_id || op.task_id !== peek.task_id)) {
    // The wake-up's hint named another workspace or task: the locks taken by it are the wrong ones. Start over.
    peekMemo.delete(operationId);
    throw new RestartCommand(`operation ${operationId}: its wake-up's hint does not match the locked row`);
  }
  if (
    !peek.hinted &&
    (op.workspace_id !== peek.workspace_id || op.task_id !== peek.task_id || op.actor_json !== peek.actor_json)
  ) {
    // Both columns are immutable; a difference means the row was rewritten. Nothing is reused.
    peekMemo.delete(operationId);
    throw new ConflictError('handle_mismatch', 'the operation row changed while it was being locked', {
      operation_id: operationId,
    });
  }
  const { plan, actor } = verifyStoredBindings(op);
  if (peek.hinted) {
    // Checked under the operation's lock: from now on a peek like any other (the task's external ID is checked
    // when its row is locked, lockTaskChainLocked).
    peek.hinted = false;
    peek.actor_json = op.actor_json;
    peek.actor = actor;
  }
  peek.plan = plan;
  if (auth.kind === 'handle') {
    const h = auth.handle;
    const matches =
      completionTokenMatches(h.completionToken, op.completion_token_sha256) &&
      h.manifestHash === op.manifest_hash &&
      h.actorBindingHash === op.actor_binding_hash &&
      h.taskId === op.task_id &&
      h.workspaceId === op.workspace_id;
    if (!matches) {
      throw new ConflictError('handle_mismatch', 'handle does not match the retained operation', {
        operation_id: operationId,
      });
    }
  }
  // When the external-ID read went ahead, the caller must read it: it is the next statement sent.
  const peekSentAhead = next[0]?.sql === EXTERNAL_ID_PEEK;
  return {
    op,
    plan,
    actor,
    workspaceState: ws.state,
    externalIdAbsent: peek.externalIdAbsent && !peekSentAhead,
    guessSent: guessed.length > 0,
  };
}

/** A recovery action runs only while its claim is the operation's live recovery claim (else zero writes). */
function checkRecoveryFence(
  row: Record<string, unknown>,
  operationId: string,
  fence: { generation: number; owner: string },
): void {
  const live =
    Number(row.recovery_generation) === fence.generation &&
    row.recovery_owner === fence.owner &&
    Number(row.recovery_live) === 1;
  if (!live) {
    throw new ConflictError('stale_claim', 'the recovery claim this action runs under is no longer live', {
      operation_id: operationId,
      recovery_generation: fence.generation,
      current_generation: Number(row.recovery_generation),
    });
  }
}

/** Locks the task row (5.2) and retained identity (6) of an operation, after
 *  the external-ID key (5.1) when the live task holds an external ID. With
 *  `steps`, the steps' lock (7) goes in the same round trip, for the caller's
 *  next `lockStepsLocked`. With `blockers`, those task rows are locked too
 *  (5.2, FOR SHARE), in one ascending order with the task's own row, and
 *  their lifecycle states returned (Complete's phase B decides a waiting
 *  resolution on them, store/complete.ts). With `heads`, those task rows are
 *  locked FOR UPDATE in the same ascending order (queued tasks a freed WIP
 *  slot admits, store/wip-admission.ts). */
export async function lockTaskChainLocked(
  tx: Tx,
  op: OperationRow,
  options: {
    externalIdKey: boolean;
    /** The guard's `externalIdAbsent`: no key to lock, and no read to learn that. */
    externalIdAbsent?: boolean;
    steps?: boolean;
    blockers?: readonly string[];
    heads?: readonly string[];
    /** The transaction goes on to check Begin's rows (the guard's `ChainAhead.planned`, ADR 0034). */
    planned?: boolean;
  },
): Promise<{
  task: TaskLockRow | undefined;
  identityState: string | undefined;
  blockers: { id: string; lifecycle_state: string | null }[];
}> {
  if (options.externalIdKey && options.externalIdAbsent !== true) {
    const peek = await tx.one<{ external_id: string | null }>(EXTERNAL_ID_PEEK, [op.task_id]);
    if (peek?.external_id != null) {
      await tx.lockKey(TIER.EXTERNAL_ID_KEY, externalIdKeyDigest(op.workspace_id, peek.external_id));
    }
  }
  const heads = new Set(options.heads ?? []);
  const ids = [...new Set([op.task_id, ...(options.blockers ?? []), ...heads])].sort();
  for (const id of ids) tx.lockRow(TIER.TASK, 'tasks', id);
  tx.lockRow(TIER.IDENTITY, 'task_identities', op.task_id);
  const blockerLock = `SELECT id, lifecycle_state FROM tasks WHERE id = ? ${tx.forShare}`;
  const headLock = 'SELECT id, lifecycle_state FROM tasks WHERE id = ? FOR UPDATE';
  const [ownLock, identityLock] = chainLocks(options.planned, op.task_id);
  const lockOf = (id: string) =>
    id === op.task_id ? ownLock : { sql: heads.has(id) ? headLock : blockerLock, params: [id] };
  // With `planned`, the own task's and identity's locks answer the plain reads of the same rows that follow
  // (ADR 0034); without, they read no text of the task and keep no answer.
  const answering =
    options.planned === true
      ? [
          ...ids.map((id) => (id === op.task_id ? { sql: TASK_ROW_READ, params: [id] } : undefined)),
          { sql: IDENTITY_ROW_READ, params: [op.task_id] },
        ]
      : [];
  const results = await tx.batchAhead(
    [...ids.map(lockOf), identityLock],
    options.steps ? [stepsLockStatement(op.id, tx.dialect)] : [],
    [],
    answering,
  );
  const at = ids.indexOf(op.task_id);
  const row = results[at]?.rows[0] as
    | (Omit<TaskLockRow, 'awaits_blockers' | 'wip_admitted'> & { awaits_blockers: unknown; wip_admitted: unknown })
    | undefined;
  if (options.externalIdKey && options.externalIdAbsent === true && row != null && row.external_id !== null) {
    // Its key (5.1) was skipped on a fact that does not hold (a wake-up's hint, ADR 0020): start over with a read.
    peekMemo.delete(op.id);
    throw new RestartCommand(`task ${op.task_id}: holds an external ID its key lock was skipped for`);
  }
  return {
    task: row && {
      ...row,
      lifecycle_generation: Number(row.lifecycle_generation),
      revision: Number(row.revision),
      awaits_blockers: bool(row.awaits_blockers),
      wip_admitted: bool(row.wip_admitted),
    },
    identityState: (results[ids.length]?.rows[0] as { state: string } | undefined)?.state,
    blockers: ids.flatMap((id, i) => {
      if (id === op.task_id || (heads.has(id) && !(options.blockers ?? []).includes(id))) return [];
      const r = results[i]?.rows[0] as { lifecycle_state: string } | undefined;
      return [{ id, lifecycle_state: r?.lifecycle_state ?? null }];
    }),
  };
}

export interface TaskLockRow {
  id: string;
  workspace_id: string;
  creation_state: string;
  lifecycle_state: string;
  lifecycle_generation: number;
  external_id: string | null;
  revision: number;
  /** True while the task waits for a later transition of its blockers (set by Begin, store/task-done.ts). */
  awaits_blockers: boolean;
  workflow_step_id: string | null;
  /** Holds a WIP slot of its step (store/wip-admission.ts). */
  wip_admitted: boolean;
  queued_for_step_id: string | null;
}
