/**
 * Creation-operation routes (`/api/v1`).
 *
 * GET  /creation-operations/:id   state, plan, hashes, actor, every step,
 *   recovery/release/result fields (never the completion token or its hash).
 *   Operators see every operation; a member only its workspace's (404 else).
 * GET  /creation-operations?state=&workspace_id=&limit=&cursor=   newest
 *   first, keyset-paginated (`next_cursor` is opaque). A member's list is
 *   confined to its workspace; naming another workspace is 404.
 * POST /creation-operations/:id/steps/:step_key/resolve {kind, proof:{resolution, evidence?}}
 *   operator only (403 otherwise). The step's effect is observed again now
 *   (runtime/operator-resolve.ts); only when the observation agrees
 *   (`succeeded` <- present_exact, `retry_wait`/`failed` <- absent_proven)
 *   is it resolved, with the observation as evidence, under actor
 *   `operator:<principal_id>`; 200 {operation_id, kind, step_key, state,
 *   observed}. Disagreement: 409 `observation_disagrees` {needed, observed,
 *   reason}, nothing written. A step that is not `unknown`: 409
 *   `creation_state_conflict`. An `evidence` document is accepted for older
 *   clients and not used: the system's observation is what is recorded.
 */
import type { FastifyPluginCallback } from 'fastify';
import { OPERATION_STATES, STEP_KINDS, type StepKind } from '../../domain/vocab';
import { createProviderRegistry } from '../../providers/registry';
import { resolveStepByOperator, type OperatorResolution } from '../../runtime/operator-resolve';
import { defaultStepHandlers } from '../../steps';
import { isUuid, mayRead, operatorOnly, principalOf, requireOperator } from '../auth';
import type { ApiDeps } from '../deps';
import { notFound } from '../errors';
import { listOperations, readOperation } from '../operation-view';
import { closed, uuid } from '../validation';

/** Why 50/200: a page fits one screen of the CLI; 200 bounds one read's cost. */
const DEFAULT_PAGE = 50;
const MAX_PAGE = 200;

const listQuery = closed({
  state: { type: 'string', enum: [...OPERATION_STATES] },
  workspace_id: uuid,
  limit: { type: 'integer', minimum: 1, maximum: MAX_PAGE, default: DEFAULT_PAGE },
  cursor: { type: 'string', minLength: 1, maxLength: 400 },
});

const resolveBody = closed(
  {
    kind: { type: 'string', enum: [...STEP_KINDS] },
    proof: closed(
      {
        resolution: { type: 'string', enum: ['succeeded', 'retry_wait', 'failed'] },
        evidence: { type: 'object' },
      },
      ['resolution'],
    ),
  },
  ['kind', 'proof'],
);

export function operationRoutes(deps: ApiDeps): FastifyPluginCallback {
  const { db } = deps;
  // What an operator's resolution is checked against: the step kinds' own observers, as the reaper runs them.
  const observer = {
    effects: {
      db,
      dataDir: deps.config.dataDir,
      providers: createProviderRegistry({ timeoutMs: deps.config.effectTimeoutMs }),
      log: deps.log,
      timeoutMs: deps.config.effectTimeoutMs,
    },
    handlers: defaultStepHandlers,
  };
  return function routes(app, _opts, done): void {
    app.get<{ Params: { id: string } }>('/creation-operations/:id', async (req) => {
      const principal = principalOf(req);
      if (!isUuid(req.params.id)) throw notFound('creation operation');
      const op = await readOperation(db, req.params.id);
      if (!op || !mayRead(principal, String(op.workspace_id))) throw notFound('creation operation');
      return op;
    });

    app.get<{ Querystring: { state?: string; workspace_id?: string; limit: number; cursor?: string } }>(
      '/creation-operations',
      { schema: { querystring: listQuery } },
      async (req) => {
        const principal = principalOf(req);
        let workspaceId = req.query.workspace_id;
        if (principal.workspace_id !== null) {
          if (workspaceId !== undefined && workspaceId !== principal.workspace_id) throw notFound('workspace');
          workspaceId = principal.workspace_id;
        }
        return listOperations(db, {
          state: req.query.state,
          workspaceId,
          limit: req.query.limit,
          cursor: req.query.cursor,
        });
      },
    );

    app.post<{
      Params: { id: string; step_key: string };
      Body: { kind: StepKind; proof: { resolution: OperatorResolution; evidence?: unknown } };
    }>(
      '/creation-operations/:id/steps/:step_key/resolve',
      { onRequest: operatorOnly, schema: { body: resolveBody } },
      async (req) => {
        const principal = requireOperator(req);
        if (!isUuid(req.params.id)) throw notFound('creation operation');
        const r = await resolveStepByOperator(
          deps.stepObserver ?? observer,
          {
            operationId: req.params.id,
            kind: req.body.kind,
            stepKey: req.params.step_key,
            actor: `operator:${principal.principal_id}`,
          },
          req.body.proof.resolution,
        );
        return {
          operation_id: req.params.id,
          kind: req.body.kind,
          step_key: req.params.step_key,
          state: r.state,
          observed: r.observed,
        };
      },
    );
    done();
  };
}
