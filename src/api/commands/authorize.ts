/**
 * Access checks of the task and workspace commands, on a principal rather
 * than a request, so every transport applies the same rule: a task or
 * workspace outside the caller's scope is the same 404 as one that does not
 * exist, and an inactive (being deleted) workspace hides its tasks too.
 */
import { readRows, type Db } from '../../db/tx';
import type { Principal } from '../../store/types';
import { isUuid, mayRead } from '../auth';
import { notFound } from '../errors';

/** The task's workspace when the principal may act on it; otherwise 404 `task`, whichever it was. */
export async function authorizeTaskFor(db: Db, principal: Principal, taskId: unknown): Promise<string> {
  if (!isUuid(taskId)) throw notFound('task');
  const [owner] = await readRows<{ workspace_id: string; state: string }>(
    db,
    'SELECT t.workspace_id, w.state FROM tasks t JOIN workspaces w ON w.id = t.workspace_id WHERE t.id = ?',
    [taskId],
  );
  if (!owner || !mayRead(principal, owner.workspace_id) || owner.state !== 'active') throw notFound('task');
  return owner.workspace_id;
}

/** The workspace ID when the principal may use it (no read); otherwise 404 `workspace`. */
export function workspaceFor(principal: Principal, workspaceId: unknown): string {
  if (!isUuid(workspaceId)) throw notFound('workspace');
  if (!mayRead(principal, workspaceId)) throw notFound('workspace');
  return workspaceId;
}
