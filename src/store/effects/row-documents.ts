/**
 * One canonical row document per effect table, and the readers that load
 * them. The same function builds the document an effect's evidence hashes and
 * the document Complete re-reads and re-hashes, so "byte-equivalent effect
 * rows" means exactly: `rowHash(doc(row now)) === row_sha256 in the evidence`.
 *
 * Contract:
 * - A document holds every stable column of its row as plain JSON (strings,
 *   numbers, null): UUIDs and hashes as the lowercase text the ledger stores,
 *   `bigint` sizes as numbers. Timestamps (`created_at`, `updated_at`) are
 *   left out: they are bookkeeping, not the effect, and a claim's own
 *   `updated_at` write must not change what it proves.
 * - Readers take a `Reader` (transaction or autocommit) and return documents
 *   (or null for an absent row); they never lock — callers lock first
 *   (`row-locks.ts`).
 */
import type { Statement } from '../../db/batch';
import { rowHash } from '../../canonical/hash';
import { sameJson } from '../../canonical/canonical-json';
import { rowRead, type Reader } from './row-locks';

type Raw = Record<string, unknown>;

function str(v: unknown): string {
  if (typeof v === 'string') return v;
  if (typeof v === 'number' || typeof v === 'bigint' || typeof v === 'boolean') return String(v);
  throw new Error(`unexpected ${typeof v} column value in an effect row`);
}
const nstr = (v: unknown): string | null => (v === null || v === undefined ? null : str(v));

function pick<T>(rows: Raw[], build: (r: Raw) => T): T | null {
  const row = rows[0];
  return row ? build(row) : null;
}

export { rowHash };

// ---------------------------------------------------------------- workspace_group_members (12.2)

export interface GroupMemberDoc {
  group_id: string;
  task_id: string;
  workspace_id: string;
  role: string;
  operation_id: string;
  step_id: string;
}
export const GROUP_MEMBER_COLUMNS = 'group_id, task_id, workspace_id, role, operation_id, step_id';
export function groupMemberDoc(r: Raw): GroupMemberDoc {
  return {
    group_id: str(r.group_id),
    task_id: str(r.task_id),
    workspace_id: str(r.workspace_id),
    role: str(r.role),
    operation_id: str(r.operation_id),
    step_id: str(r.step_id),
  };
}
export async function readGroupMember(read: Reader, groupId: string, taskId: string): Promise<GroupMemberDoc | null> {
  const rows = await read(rowRead('workspace_group_members', GROUP_MEMBER_COLUMNS, 'group_id = ? AND task_id = ?'), [
    groupId,
    taskId,
  ]);
  return pick(rows, groupMemberDoc);
}

// ---------------------------------------------------------------- task_blockers (12.2)

export interface BlockerDoc {
  task_id: string;
  blocker_task_id: string;
  workspace_id: string;
  operation_id: string;
  step_id: string;
}
export const BLOCKER_COLUMNS = 'task_id, blocker_task_id, workspace_id, operation_id, step_id';
export function blockerDoc(r: Raw): BlockerDoc {
  return {
    task_id: str(r.task_id),
    blocker_task_id: str(r.blocker_task_id),
    workspace_id: str(r.workspace_id),
    operation_id: str(r.operation_id),
    step_id: str(r.step_id),
  };
}
export async function readBlocker(read: Reader, taskId: string, blockerId: string): Promise<BlockerDoc | null> {
  const rows = await read(rowRead('task_blockers', BLOCKER_COLUMNS, 'task_id = ? AND blocker_task_id = ?'), [
    taskId,
    blockerId,
  ]);
  return pick(rows, blockerDoc);
}

// ---------------------------------------------------------------- task_environment_bindings (11.1)

export interface EnvironmentBindingDoc {
  task_id: string;
  environment_id: string;
  workspace_id: string;
  operation_id: string;
  step_id: string;
}
export function environmentBindingDoc(r: Raw): EnvironmentBindingDoc {
  return {
    task_id: str(r.task_id),
    environment_id: str(r.environment_id),
    workspace_id: str(r.workspace_id),
    operation_id: str(r.operation_id),
    step_id: str(r.step_id),
  };
}
export const BINDING_COLUMNS = 'task_id, environment_id, workspace_id, operation_id, step_id';
export async function readEnvironmentBinding(read: Reader, taskId: string): Promise<EnvironmentBindingDoc | null> {
  const rows = await read(rowRead('task_environment_bindings', BINDING_COLUMNS, 'task_id = ?'), [taskId]);
  return pick(rows, environmentBindingDoc);
}

// ---------------------------------------------------------------- task_environments (11.1, referenced only)

export interface EnvironmentDoc {
  id: string;
  workspace_id: string;
  task_id: string | null;
  kind: string;
}
export const ENVIRONMENT_COLUMNS = 'id, workspace_id, task_id, kind';
export async function readEnvironment(read: Reader, id: string): Promise<EnvironmentDoc | null> {
  const rows = await read(rowRead('task_environments', ENVIRONMENT_COLUMNS, 'id = ?'), [id]);
  return pick(rows, (r) => ({
    id: str(r.id),
    workspace_id: str(r.workspace_id),
    task_id: nstr(r.task_id),
    kind: str(r.kind),
  }));
}

// ---------------------------------------------------------------- task_environment_repos (11.2)

export interface EnvironmentRepoDoc {
  id: string;
  environment_id: string;
  workspace_id: string;
  repository_id: string;
  worktree_path: string | null;
  branch: string | null;
  base_commit: string | null;
  operation_id: string | null;
  step_id: string | null;
}
export const ENV_REPO_COLUMNS =
  'id, environment_id, workspace_id, repository_id, worktree_path, branch, base_commit, operation_id, step_id';
export function environmentRepoDoc(r: Raw): EnvironmentRepoDoc {
  return {
    id: str(r.id),
    environment_id: str(r.environment_id),
    workspace_id: str(r.workspace_id),
    repository_id: str(r.repository_id),
    worktree_path: nstr(r.worktree_path),
    branch: nstr(r.branch),
    base_commit: nstr(r.base_commit),
    operation_id: nstr(r.operation_id),
    step_id: nstr(r.step_id),
  };
}
export async function readEnvironmentRepo(read: Reader, id: string): Promise<EnvironmentRepoDoc | null> {
  const rows = await read(rowRead('task_environment_repos', ENV_REPO_COLUMNS, 'id = ?'), [id]);
  return pick(rows, environmentRepoDoc);
}
/** Every repository row of one environment, ascending by id. */
export async function readEnvironmentRepos(read: Reader, environmentId: string): Promise<EnvironmentRepoDoc[]> {
  const rows = await read(rowRead('task_environment_repos', ENV_REPO_COLUMNS, 'environment_id = ?'), [environmentId]);
  return rows.map(environmentRepoDoc).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

// ---------------------------------------------------------------- task_message_attachments (14)

export interface AttachmentDoc {
  id: string;
  workspace_id: string;
  owner_kind: string;
  staging_owner_id: string;
  task_id: string | null;
  claimed_by_operation_id: string | null;
  claimed_by_step_id: string | null;
  content_sha256: string;
  size: number;
  storage_path: string;
}
export function attachmentDoc(r: Raw): AttachmentDoc {
  return {
    id: str(r.id),
    workspace_id: str(r.workspace_id),
    owner_kind: str(r.owner_kind),
    staging_owner_id: str(r.staging_owner_id),
    task_id: nstr(r.task_id),
    claimed_by_operation_id: nstr(r.claimed_by_operation_id),
    claimed_by_step_id: nstr(r.claimed_by_step_id),
    content_sha256: str(r.content_sha256),
    size: Number(r.size),
    storage_path: str(r.storage_path),
  };
}
export async function readAttachment(read: Reader, id: string): Promise<AttachmentDoc | null> {
  const rows = await read(
    `SELECT id, workspace_id, owner_kind, staging_owner_id, task_id, claimed_by_operation_id, claimed_by_step_id,
            content_sha256, size, storage_path
       FROM task_message_attachments WHERE id = ?`,
    [id],
  );
  return pick(rows, attachmentDoc);
}

// ---------------------------------------------------------------- task_sessions (9)

export interface SessionDoc {
  id: string;
  task_id: string;
  workspace_id: string;
  environment_id: string;
  executor_id: string;
  executor_profile_id: string;
  agent_profile_id: string;
  launch_config_sha256: string;
  state: string;
  operation_id: string;
  step_id: string;
}
export function sessionDoc(r: Raw): SessionDoc {
  return {
    id: str(r.id),
    task_id: str(r.task_id),
    workspace_id: str(r.workspace_id),
    environment_id: str(r.environment_id),
    executor_id: str(r.executor_id),
    executor_profile_id: str(r.executor_profile_id),
    agent_profile_id: str(r.agent_profile_id),
    launch_config_sha256: str(r.launch_config_sha256),
    state: str(r.state),
    operation_id: str(r.operation_id),
    step_id: str(r.step_id),
  };
}
export const SESSION_COLUMNS =
  'id, task_id, workspace_id, environment_id, executor_id, executor_profile_id, agent_profile_id, launch_config_sha256, state, operation_id, step_id';
export async function readSession(read: Reader, id: string): Promise<SessionDoc | null> {
  const rows = await read(rowRead('task_sessions', SESSION_COLUMNS, 'id = ?'), [id]);
  return pick(rows, sessionDoc);
}

/** Whether an `executors_running` row exists for the session (any state). */
export async function runtimeExists(read: Reader, sessionId: string): Promise<boolean> {
  const rows = await read(rowRead('executors_running', 'id', 'session_id = ?'), [sessionId]);
  return rows.length > 0;
}

// ---------------------------------------------------------------- executors_running (10)

export interface RuntimeDoc {
  id: string;
  session_id: string;
  task_id: string;
  workspace_id: string;
  dispatch_claim_id: string;
  runtime_handle: string;
  pid: number | null;
  state: string;
}
export async function readRuntime(read: Reader, id: string): Promise<RuntimeDoc | null> {
  const rows = await read(
    `SELECT id, session_id, task_id, workspace_id, dispatch_claim_id, runtime_handle, pid, state
       FROM executors_running WHERE id = ?`,
    [id],
  );
  return pick(rows, (r) => ({
    id: str(r.id),
    session_id: str(r.session_id),
    task_id: str(r.task_id),
    workspace_id: str(r.workspace_id),
    dispatch_claim_id: str(r.dispatch_claim_id),
    runtime_handle: str(r.runtime_handle),
    pid: r.pid === null || r.pid === undefined ? null : Number(r.pid),
    state: str(r.state),
  }));
}

// ---------------------------------------------------------------- task_resource_markers (14)

export interface MarkerDoc {
  resource_key: string;
  workspace_id: string;
  task_id: string;
  operation_id: string;
  step_id: string;
  kind: string;
  marker_sha256: string;
}
export function markerDoc(r: Raw): MarkerDoc {
  return {
    resource_key: str(r.resource_key),
    workspace_id: str(r.workspace_id),
    task_id: str(r.task_id),
    operation_id: str(r.operation_id),
    step_id: str(r.step_id),
    kind: str(r.kind),
    marker_sha256: str(r.marker_sha256),
  };
}
export const MARKER_COLUMNS = 'resource_key, workspace_id, task_id, operation_id, step_id, kind, marker_sha256';
/** The INSERT of one marker row, stamped with the transaction's clock (`tx.now`). */
export function markerInsert(tx: { readonly now: string }, m: MarkerDoc): Statement {
  return {
    sql: `INSERT INTO task_resource_markers (${MARKER_COLUMNS}, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ${tx.now})`,
    params: [m.resource_key, m.workspace_id, m.task_id, m.operation_id, m.step_id, m.kind, m.marker_sha256],
  };
}
export async function readMarker(read: Reader, resourceKey: string): Promise<MarkerDoc | null> {
  const rows = await read(rowRead('task_resource_markers', MARKER_COLUMNS, 'resource_key = ?'), [resourceKey]);
  return pick(rows, markerDoc);
}

/** Byte equality of two row documents: the same canonical bytes, so the same `rowHash`, compared without hashing. */
export function sameRow(a: unknown, b: unknown): boolean {
  return a !== null && b !== null && sameJson(a, b);
}
