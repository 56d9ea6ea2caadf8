/**
 * External-ID lookup and release (companion notes §2), `/api/v1`.
 *
 * GET /workspaces/:id/tasks/by-external-id?external_id=   read-only lookup;
 *   any caller with access to the workspace. 200 {task, creation_complete};
 *   404 when no task holds the ID, the workspace does not exist, or the
 *   caller may not use it; 400 for a malformed ID — checked only after the
 *   workspace is authorized, so an outsider learns nothing.
 * DELETE (same path)   release: operator only (403 otherwise, before any
 *   read; the notes make it an operator's judgement that an identity was
 *   abandoned). A recorded release operation (`external_id_releases`, shown
 *   in `GET /creation-operations/:id` as `release`; src/setup/release-external-id.ts).
 *   204 with an empty body once the ID is released, 404 none holds it, 400
 *   malformed, 409 `creation_state_conflict` while the holder's creation is
 *   busy: a step running or unknown, compensation pending, between Complete's
 *   phases, or another release of it in progress.
 */
import type { FastifyPluginCallback, FastifyRequest } from 'fastify';
import { ValidationError } from '../../domain/errors';
import { readRows, type Db } from '../../db/tx';
import { normalizeExternalId } from '../../plan/external-id';
import { releaseExternalId } from '../../setup/release-external-id';
import { findByExternalId } from '../../store/task-view';
import { operatorOnly, requireOperator, requireWorkspace } from '../auth';
import type { ApiDeps } from '../deps';
import { notFound } from '../errors';

type Route = { Params: { id: string }; Querystring: Record<string, unknown> };
type Req = FastifyRequest<Route>;

/** Authorizes the workspace first, then validates the query; returns the workspace and normalized ID. */
async function authorizedLookup(db: Db, req: Req): Promise<{ workspaceId: string; externalId: string }> {
  const workspaceId = requireWorkspace(req, req.params.id);
  const ws = await readRows<{ state: string }>(db, 'SELECT state FROM workspaces WHERE id = ?', [workspaceId]);
  if (!ws[0] || ws[0].state !== 'active') throw notFound('workspace');
  const extra = Object.keys(req.query).find((k) => k !== 'external_id');
  if (extra !== undefined) throw new ValidationError(`/${extra}`, 'unknown query parameter');
  const externalId = normalizeExternalId(req.query.external_id);
  if (externalId === null) throw new ValidationError('/external_id', 'is required', 'invalid_external_id');
  return { workspaceId, externalId };
}

export function externalIdRoutes(deps: ApiDeps): FastifyPluginCallback {
  const { db } = deps;
  const path = '/workspaces/:id/tasks/by-external-id';
  return function routes(app, _opts, done): void {
    app.get<Route>(path, async (req) => {
      const { workspaceId, externalId } = await authorizedLookup(db, req);
      const task = await findByExternalId(db, workspaceId, externalId);
      if (!task) throw notFound('task');
      return { task, creation_complete: task.creation_complete };
    });

    app.delete<Route>(path, { onRequest: operatorOnly }, async (req, reply) => {
      const operator = requireOperator(req);
      const { workspaceId, externalId } = await authorizedLookup(db, req);
      const res = await releaseExternalId(db, workspaceId, externalId, operator.principal_id);
      if (!res.released) throw notFound('task');
      return reply.status(204).send();
    });
    done();
  };
}
