/**
 * The external-ID lookup command (`GET /workspaces/:id/tasks/by-external-id`,
 * MCP `find_task_by_external_id`): read-only. The workspace is authorized
 * first (404 for one outside the caller's scope, missing or being deleted),
 * then the query is validated (unknown parameter 400, malformed ID 400
 * `invalid_external_id`), so an outsider learns nothing. 200 {task,
 * creation_complete}: the only read that shows a task still being created.
 */
import { ValidationError } from '../../domain/errors';
import { readRows, type Db } from '../../db/tx';
import { normalizeExternalId } from '../../plan/external-id';
import { findByExternalId } from '../../store/task-view';
import type { Principal } from '../../store/types';
import { notFound } from '../errors';
import { workspaceFor } from './authorize';
import type { CommandContext } from './context';

/** Authorizes the workspace first, then validates the query; returns the workspace and normalized ID. */
export async function authorizedLookup(
  db: Db,
  principal: Principal,
  workspaceIdParam: unknown,
  query: Record<string, unknown>,
): Promise<{ workspaceId: string; externalId: string }> {
  const workspaceId = workspaceFor(principal, workspaceIdParam);
  const ws = await readRows<{ state: string }>(db, 'SELECT state FROM workspaces WHERE id = ?', [workspaceId]);
  if (!ws[0] || ws[0].state !== 'active') throw notFound('workspace');
  const extra = Object.keys(query).find((k) => k !== 'external_id');
  if (extra !== undefined) throw new ValidationError(`/${extra}`, 'unknown query parameter');
  const externalId = normalizeExternalId(query.external_id);
  if (externalId === null) throw new ValidationError('/external_id', 'is required', 'invalid_external_id');
  return { workspaceId, externalId };
}

export async function lookupByExternalIdCommand(
  ctx: CommandContext,
  workspaceId: unknown,
  query: Record<string, unknown>,
): Promise<Record<string, unknown>> {
  const { db } = ctx.deps;
  const found = await authorizedLookup(db, ctx.principal, workspaceId, query);
  const task = await findByExternalId(db, found.workspaceId, found.externalId);
  if (!task) throw notFound('task');
  return { task, creation_complete: task.creation_complete };
}
