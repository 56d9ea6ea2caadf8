/**
 * BeginTaskCreation: admission of one create request.
 *
 * Order (companion notes §2): authorize the workspace; validate and normalize
 * the external ID; look it up before any write or allocation (found: return
 * it, nothing else runs); then validate the whole request, resolve references
 * (autocommit reads, Git rev-parse — never inside a transaction), build the
 * CreationPlan, and run the one Begin transaction (`begin-insert.ts`). After a
 * lookup miss, any failure before the insert re-reads the ID first and returns
 * the found task instead of the failure when one now holds it. Without an
 * external ID, the workspace's state is read alongside the references (all
 * reads), and the caller's token too when the caller is a `PrincipalLookup`
 * (ADR 0025: one round trip for the three); the answer still follows this
 * order: nothing is reported before the caller is known and authorized and
 * the workspace known active. A known Principal is authorized before
 * anything is read; Git runs only for an authorized caller.
 *
 * A request of the common shape whose every reference this process read
 * before builds its plan from those answers with no read at all, and its one
 * transaction checks each of them (ADR 0052, begin-context-cache.ts); a fact
 * that no longer holds writes nothing and sends the request down the path
 * above, from fresh reads.
 *
 * Returns `{task, outcome, handle}`; the handle is non-null only for Created.
 */
import { randomUUID } from 'node:crypto';
import { newCompletionToken } from '../canonical/completion-token';
import { TaskLedgerError, ValidationError } from '../domain/errors';
import { readRows, type Db, type Statement } from '../db/tx';
import { buildCreationPlan, type BuiltPlan } from '../plan/build-plan';
import { validateCreateRequest, type CreateTaskRequest } from '../plan/create-request';
import { normalizeExternalId } from '../plan/external-id';
import { actorDocumentFor, mayUseWorkspace } from './actor';
import { resolvePlanContext } from './begin-context';
import { contextCacheOf, countContext } from './begin-context-cache';
import { insertCreation, StaleContext, type InsertInput } from './begin-insert';
import { findByExternalId, isSettled } from './task-view';
import type { BeginResult, Caller, CreationHandle, Principal } from './types';

export interface BeginDeps {
  /** Absolute directory for worktrees and staged attachments. */
  dataDir: string;
  newId?: () => string;
  resolveCommit?: (repoPath: string, ref: string) => Promise<string>;
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** Failures after a lookup miss that must yield to a task that now holds the ID. */
const YIELDING_CODES = new Set(['invalid_request', 'not_found', 'capacity_conflict', 'creation_state_conflict']);

function notAuthorized(): TaskLedgerError {
  return new TaskLedgerError('not_authorized', 'task not created', {});
}

/** The request's workspace when the principal may use it (no read); otherwise `not_authorized`. */
function requestWorkspace(principal: Principal, raw: unknown): string {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new ValidationError('/', 'request body must be a JSON object');
  }
  const ws = namedWorkspace(raw);
  // A malformed or foreign workspace is indistinguishable from a missing one.
  if (ws === null || !mayUseWorkspace(principal, ws)) throw notAuthorized();
  return ws;
}

/** The well-formed workspace ID a request names, or null (nothing is checked or thrown here). */
function namedWorkspace(raw: unknown): string | null {
  const ws = raw !== null && typeof raw === 'object' ? (raw as Record<string, unknown>).workspace_id : undefined;
  return typeof ws === 'string' && UUID_RE.test(ws) ? ws : null;
}

interface Authorized {
  principal: Principal;
  workspaceId: string;
}

/**
 * The caller authorized for the request's workspace. A known Principal is checked at once, before anything is
 * read; a looked-up one once its token was read, and that read is issued now.
 */
function authorize(caller: Caller, raw: unknown): Promise<Authorized> {
  if (!('lookup' in caller)) return Promise.resolve({ principal: caller, workspaceId: requestWorkspace(caller, raw) });
  return caller.lookup().then((principal) => ({ principal, workspaceId: requestWorkspace(principal, raw) }));
}

/** Rejects with `not_authorized` unless the workspace is active (one read). */
async function requireActive(db: Db, ws: string): Promise<void> {
  const rows = await readRows<{ state: string }>(db, 'SELECT state FROM workspaces WHERE id = ?', [ws]);
  // A workspace being deleted answers as one that does not exist (API.md, DELETE /workspaces/:id).
  if (!rows[0] || rows[0].state !== 'active') throw notAuthorized();
}

function foundResult(task: NonNullable<Awaited<ReturnType<typeof findByExternalId>>>): BeginResult {
  return {
    task,
    outcome: isSettled(task.creation_state) ? 'FoundSettled' : 'FoundUnsettled',
    handle: null,
    operationId: task.creation_operation_id,
    steps: [],
  };
}

/**
 * Begin from remembered context (ADR 0052): the result, or null when this request cannot take that path (a shape
 * the memory does not answer, a fact not remembered, anything refused) or a fence found a remembered fact no longer
 * true. Null means nothing was written: the caller runs the path from fresh reads, which answers as it always did.
 */
async function beginFromMemory(
  db: Db,
  caller: Caller,
  raw: unknown,
  deps: BeginDeps,
  handedOut: string[],
): Promise<BeginResult | null> {
  const cache = contextCacheOf(db);
  const tokenSha256 = 'lookup' in caller ? (caller.tokenSha256 ?? null) : null;
  const principal = 'lookup' in caller ? (tokenSha256 === null ? undefined : cache.principal(tokenSha256)) : caller;
  const workspaceId = namedWorkspace(raw);
  if (principal === undefined || workspaceId === null || !mayUseWorkspace(principal, workspaceId)) return null;
  // The IDs handed out here are handed out again, in the same order, to the path from fresh reads should this one
  // give way: that path makes the same calls for the same request, so a fallback plans exactly the same IDs.
  const source = deps.newId ?? randomUUID;
  const newId = () => {
    const id = source();
    handedOut.push(id);
    return id;
  };
  let req: CreateTaskRequest;
  let built: BuiltPlan;
  let remembered;
  try {
    if (normalizeExternalId((raw as Record<string, unknown>).external_id) !== null) return null;
    req = validateCreateRequest(raw);
    const taskId = req.task_id ?? newId();
    remembered = cache.context(req, principal, tokenSha256, { taskId, dataDir: deps.dataDir, newId });
    if (remembered === null) return null;
    built = buildCreationPlan(req, remembered.ctx);
  } catch {
    // Whatever is wrong with it is answered by the path from fresh reads, in its order.
    return null;
  }
  const fence = remembered.fence;
  return unlessStale(db, req, tokenSha256, () =>
    insertAndAnswer(db, {
      built,
      actor: actorDocumentFor(principal, workspaceId),
      workspaceId,
      newId,
      contextFence: fence,
    }),
  );
}

/**
 * Runs Begin's transaction for a plan from memory: its answer, or null when the context fence found a remembered
 * fact no longer true (nothing was written; the facts the request used are forgotten, and the caller plans afresh).
 */
async function unlessStale(
  db: Db,
  req: CreateTaskRequest,
  tokenSha256: string | null,
  attempt: () => Promise<BeginResult>,
): Promise<BeginResult | null> {
  try {
    const res = await attempt();
    countContext('memory');
    return res;
  } catch (err) {
    if (!(err instanceof StaleContext)) throw err;
    countContext('stale');
    contextCacheOf(db).forget(req, tokenSha256);
    return null;
  }
}

/** An ID source that first hands out `ids` again, in order, then continues with `next`. */
function replaying(ids: readonly string[], next: () => string): () => string {
  let i = 0;
  return () => (i < ids.length ? ids[i++]! : next());
}

/** Begin's transaction for a built plan, and its answer. */
async function insertAndAnswer(
  db: Db,
  a: Pick<InsertInput, 'built' | 'actor' | 'newId' | 'contextFence'> & {
    workspaceId: string;
    externalId?: string | null;
  },
): Promise<BeginResult> {
  const taskId = a.built.plan.task_id;
  const token = newCompletionToken();
  const operationId = a.newId();
  const res = await insertCreation(db, {
    operationId,
    built: a.built,
    actor: a.actor,
    externalId: a.externalId ?? null,
    completionTokenSha256: token.sha256,
    newId: a.newId,
    contextFence: a.contextFence,
  });
  if (res.kind === 'found')
    return {
      task: res.task,
      outcome: res.outcome,
      handle: null,
      operationId: res.task.creation_operation_id,
      steps: [],
    };
  if (res.kind === 'identity_reused') {
    throw new TaskLedgerError('task_identity_reused', `task ID ${taskId} was already used; nothing was written`, {
      task_id: taskId,
    });
  }
  const handle: CreationHandle = Object.freeze({
    operationId,
    taskId,
    workspaceId: a.workspaceId,
    completionToken: token.token,
    actorBindingHash: res.actorBindingHash,
    manifestHash: res.manifestHash,
  });
  return { task: res.task, outcome: 'Created', handle, operationId, steps: res.steps };
}

export async function beginTaskCreation(db: Db, caller: Caller, raw: unknown, deps: BeginDeps): Promise<BeginResult> {
  const handedOut: string[] = [];
  const fromMemory = await beginFromMemory(db, caller, raw, deps, handedOut);
  if (fromMemory !== null) return fromMemory;
  if (handedOut.length > 0) deps = { ...deps, newId: replaying(handedOut, deps.newId ?? randomUUID) };
  // A caller whose token is still to be read has it read together with the workspace's state and the plan's
  // references: one round trip (ADR 0025). Reads only; Begin re-checks the authority and the workspace under its
  // locks. Nothing is reported before the caller is known and authorized, then the workspace known active: every
  // error below waits for both, in that order, so an unknown token is answered as such and an inactive workspace
  // as `not_authorized`, whatever else is wrong with the request. Git, the only other I/O, waits for the caller.
  const authorized = authorize(caller, raw);
  authorized.catch(() => undefined);
  // Null only when `authorized` rejects (a malformed or missing workspace is `not_authorized`).
  const workspaceId = namedWorkspace(raw) ?? (await authorized).workspaceId;
  const active = requireActive(db, workspaceId);
  active.catch(() => undefined);
  const admitted = async (): Promise<Authorized> => {
    const a = await authorized;
    await active;
    return a;
  };
  let externalId: string | null;
  try {
    externalId = normalizeExternalId((raw as Record<string, unknown>).external_id);
  } catch (err) {
    await admitted();
    throw err;
  }
  if (externalId !== null) {
    await admitted();
    const found = await findByExternalId(db, workspaceId, externalId);
    if (found) return foundResult(found);
  }
  const newId = deps.newId ?? randomUUID;
  try {
    const req = validateCreateRequest(raw);
    const taskId = req.task_id ?? newId();
    const base = { taskId, dataDir: deps.dataDir, newId };
    const fresh = () => resolvePlanContext(db, req, taskId, { ...base, resolveCommit: deps.resolveCommit, authorized });
    // A request with an external ID reaches here admitted and its ID looked up (the principal read afresh): its
    // context may come from memory (ADR 0052), checked by its transaction. Any other request got here from memory
    // only when it could not be answered there, so its context is read afresh, alongside the caller's token.
    const remembered =
      externalId === null ? null : contextCacheOf(db).context(req, (await authorized).principal, null, base);
    const context = remembered === null ? fresh() : Promise.resolve(remembered.ctx);
    context.catch(() => undefined);
    const { principal: known } = await admitted();
    const plan = async (ctx: Awaited<typeof context>, contextFence?: Statement) => {
      const built = buildCreationPlan(req, ctx);
      if (!contextFence) {
        // Every read answered and the caller admitted: what they said may serve the next request (ADR 0052).
        contextCacheOf(db).remember(req, ctx, known, 'lookup' in caller ? (caller.tokenSha256 ?? null) : null);
        countContext('fresh');
      }
      const actor = actorDocumentFor(known, workspaceId);
      return insertAndAnswer(db, { built, actor, workspaceId, newId, externalId, contextFence });
    };
    if (remembered === null) return await plan(await context);
    return (
      (await unlessStale(db, req, null, () => plan(remembered.ctx, remembered.fence))) ?? (await plan(await fresh()))
    );
  } catch (err) {
    await admitted();
    if (externalId !== null && err instanceof TaskLedgerError && YIELDING_CODES.has(err.code)) {
      const found = await findByExternalId(db, workspaceId, externalId);
      if (found) return foundResult(found);
    }
    throw err;
  }
}
