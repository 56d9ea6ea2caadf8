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
import { STEP_KINDS, type StepKind } from '../../domain/vocab';
import { createProviderRegistry } from '../../providers/registry';
import { resolveStepByOperator, type OperatorResolution } from '../../runtime/operator-resolve';
import { defaultStepHandlers } from '../../kinds/registry';
import { isUuid, operatorOnly, principalOf, requireOperator } from '../auth';
import { requestContext } from '../commands/context';
import { listOperationsCommand, readOperationCommand } from '../commands/operation-commands';
import { listOperationsQuery } from '../commands/schemas';
import type { ApiDeps } from '../deps';
import { notFound } from '../errors';
import { closed } from '../validation';

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
    app.get<{ Params: { id: string } }>('/creation-operations/:id', async (req) =>
      readOperationCommand(requestContext(deps, principalOf(req), req.log), req.params.id),
    );

    app.get<{ Querystring: { state?: string; workspace_id?: string; limit: number; cursor?: string } }>(
      '/creation-operations',
      { schema: { querystring: listOperationsQuery } },
      async (req) => listOperationsCommand(requestContext(deps, principalOf(req), req.log), req.query),
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
