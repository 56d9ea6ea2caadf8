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
import type { FastifyPluginCallback } from 'fastify';
import { releaseExternalId } from '../../setup/release-external-id';
import { operatorOnly, principalOf, requireOperator } from '../auth';
import { requestContext } from '../commands/context';
import { authorizedLookup, lookupByExternalIdCommand } from '../commands/lookup';
import type { ApiDeps } from '../deps';
import { notFound } from '../errors';

type Route = { Params: { id: string }; Querystring: Record<string, unknown> };

export function externalIdRoutes(deps: ApiDeps): FastifyPluginCallback {
  const { db } = deps;
  const path = '/workspaces/:id/tasks/by-external-id';
  return function routes(app, _opts, done): void {
    app.get<Route>(path, async (req) => {
      return lookupByExternalIdCommand(requestContext(deps, principalOf(req), req.log), req.params.id, req.query);
    });

    app.delete<Route>(path, { onRequest: operatorOnly }, async (req, reply) => {
      const operator = requireOperator(req);
      const { workspaceId, externalId } = await authorizedLookup(db, operator, req.params.id, req.query);
      const res = await releaseExternalId(db, workspaceId, externalId, operator.principal_id);
      if (!res.released) throw notFound('task');
      return reply.status(204).send();
    });
    done();
  };
}
