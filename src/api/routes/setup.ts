/**
 * Setup routes (`/api/v1`): workspaces and everything a create request can
 * reference. All but the attachment upload need an operator token (403
 * otherwise, decided before anything is read). Bodies are closed schemas; the
 * SQL lives in `src/setup/` (one transaction per writer) so the CLI demo can
 * reuse it. A workspace that does not exist is 404 `not_found`.
 *
 * POST /workspaces                              {name}                              -> 201 {id, name, state}
 * POST /workspaces/:id/repositories             {name, path, default_branch, remote_slug?}
 * POST /workspaces/:id/workflows                {name, steps:[{name, wip_limit?, auto_start?}]}
 * POST /workspaces/:id/agent-profiles           {name, executor:{kind:"local", command:[..]}}
 * POST /workspaces/:id/provider-connections     {provider, base_url, token}           (token never echoed)
 * POST /workspaces/:id/groups                   {name}
 * POST /workspaces/:id/environments             {name, repository_ids:[]}
 * POST /workspaces/:id/tokens                   {principal_id, role?}                 -> 201 {token, ...} (shown once)
 * POST /workspaces/:id/attachments              raw application/octet-stream body (<= 25 MiB), any caller
 *                                               with access to the workspace          -> 201 {attachment_id, content_sha256, size}
 */
import type { FastifyPluginCallback, FastifyRequest } from 'fastify';
import { PROVIDERS } from '../../domain/vocab';
import { BRANCH_PATTERN } from '../../canonical/schemas/fragments';
import {
  createAgentProfile,
  createGroup,
  createProviderConnection,
  createRepository,
  createSharedEnvironment,
  createWorkflow,
  createWorkspace,
  issueToken,
  MAX_ATTACHMENT_BYTES,
  stageAttachment,
  type LocalExecutor,
  type TokenRole,
  type WorkflowStepInput,
} from '../../setup';
import type { Provider } from '../../domain/vocab';
import { operatorOnly, principalOf, requireOperator, requireWorkspace, workspaceAccess } from '../auth';
import type { ApiDeps } from '../deps';
import { unsupportedMediaType } from '../errors';
import { closed, name200, text, uuid } from '../validation';

type WsParams = { Params: { id: string } };

const schemas = {
  workspace: closed({ name: name200 }, ['name']),
  repository: closed(
    {
      name: name200,
      path: text(1024),
      default_branch: { type: 'string', minLength: 1, maxLength: 255, pattern: BRANCH_PATTERN },
      // GitHub `owner/repo` or a GitLab project path (`group/sub/project`).
      remote_slug: {
        anyOf: [{ type: 'string', maxLength: 255, pattern: '^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$' }, { type: 'null' }],
      },
    },
    ['name', 'path', 'default_branch'],
  ),
  workflow: closed(
    {
      name: name200,
      steps: {
        type: 'array',
        minItems: 1,
        maxItems: 100,
        items: closed(
          {
            name: name200,
            wip_limit: { type: 'integer', minimum: 0, maximum: 1_000_000 },
            auto_start: { type: 'boolean' },
          },
          ['name'],
        ),
      },
    },
    ['name', 'steps'],
  ),
  agentProfile: closed(
    {
      name: name200,
      executor: closed(
        {
          kind: { type: 'string', enum: ['local'] },
          command: {
            type: 'array',
            minItems: 1,
            maxItems: 256,
            items: { type: 'string', minLength: 1, maxLength: 8192 },
          },
        },
        ['kind', 'command'],
      ),
    },
    ['name', 'executor'],
  ),
  providerConnection: closed(
    {
      provider: { type: 'string', enum: [...PROVIDERS] },
      base_url: { type: 'string', minLength: 8, maxLength: 1024, pattern: '^https?://[^\\s]+$' },
      token: text(1024),
    },
    ['provider', 'base_url', 'token'],
  ),
  group: closed({ name: name200 }, ['name']),
  environment: closed(
    { name: name200, repository_ids: { type: 'array', maxItems: 100, uniqueItems: true, items: uuid } },
    ['name', 'repository_ids'],
  ),
  token: closed({ principal_id: text(200), role: { type: 'string', enum: ['member', 'operator'] } }, ['principal_id']),
};

/** Operator-only route on an existing workspace: 403 for others, 404 for a malformed ID. */
function operatorWorkspace(request: FastifyRequest<WsParams>): string {
  requireOperator(request);
  return requireWorkspace(request, request.params.id);
}

export function setupRoutes(deps: ApiDeps): FastifyPluginCallback {
  const { db } = deps;
  return function routes(app, _opts, done): void {
    app.post<{ Body: { name: string } }>(
      '/workspaces',
      { onRequest: operatorOnly, schema: { body: schemas.workspace } },
      async (req, reply) => {
        requireOperator(req);
        return reply.status(201).send(await createWorkspace(db, req.body));
      },
    );

    app.post<WsParams & { Body: { name: string; path: string; default_branch: string; remote_slug?: string | null } }>(
      '/workspaces/:id/repositories',
      { onRequest: operatorOnly, schema: { body: schemas.repository } },
      async (req, reply) => reply.status(201).send(await createRepository(db, operatorWorkspace(req), req.body)),
    );

    app.post<WsParams & { Body: { name: string; steps: WorkflowStepInput[] } }>(
      '/workspaces/:id/workflows',
      { onRequest: operatorOnly, schema: { body: schemas.workflow } },
      async (req, reply) => reply.status(201).send(await createWorkflow(db, operatorWorkspace(req), req.body)),
    );

    app.post<WsParams & { Body: { name: string; executor: LocalExecutor } }>(
      '/workspaces/:id/agent-profiles',
      { onRequest: operatorOnly, schema: { body: schemas.agentProfile } },
      async (req, reply) => reply.status(201).send(await createAgentProfile(db, operatorWorkspace(req), req.body)),
    );

    app.post<WsParams & { Body: { provider: Provider; base_url: string; token: string } }>(
      '/workspaces/:id/provider-connections',
      { onRequest: operatorOnly, schema: { body: schemas.providerConnection } },
      async (req, reply) =>
        reply.status(201).send(await createProviderConnection(db, operatorWorkspace(req), req.body)),
    );

    app.post<WsParams & { Body: { name: string } }>(
      '/workspaces/:id/groups',
      { onRequest: operatorOnly, schema: { body: schemas.group } },
      async (req, reply) => reply.status(201).send(await createGroup(db, operatorWorkspace(req), req.body)),
    );

    app.post<WsParams & { Body: { name: string; repository_ids: string[] } }>(
      '/workspaces/:id/environments',
      { onRequest: operatorOnly, schema: { body: schemas.environment } },
      async (req, reply) => reply.status(201).send(await createSharedEnvironment(db, operatorWorkspace(req), req.body)),
    );

    app.post<WsParams & { Body: { principal_id: string; role?: TokenRole } }>(
      '/workspaces/:id/tokens',
      { onRequest: operatorOnly, schema: { body: schemas.token } },
      async (req, reply) => reply.status(201).send(await issueToken(db, operatorWorkspace(req), req.body)),
    );

    // The upload scope has its own raw-body parser; access is checked before the body is read.
    void app.register((upload, _uploadOpts, uploadDone) => {
      // Only raw bytes: any other content type is 415 before the body is read.
      upload.removeAllContentTypeParsers();
      upload.addContentTypeParser(
        'application/octet-stream',
        { parseAs: 'buffer', bodyLimit: MAX_ATTACHMENT_BYTES },
        (_req, body, done) => done(null, body),
      );
      upload.post<WsParams & { Body: Buffer | undefined }>(
        '/workspaces/:id/attachments',
        {
          bodyLimit: MAX_ATTACHMENT_BYTES,
          onRequest: workspaceAccess,
        },
        async (req, reply) => {
          const principal = principalOf(req);
          if (!Buffer.isBuffer(req.body)) throw unsupportedMediaType('application/octet-stream');
          const staged = await stageAttachment(db, {
            dataDir: deps.config.dataDir,
            workspaceId: requireWorkspace(req, req.params.id),
            ownerPrincipalId: principal.principal_id,
            bytes: req.body,
          });
          return reply.status(201).send({
            attachment_id: staged.attachment_id,
            content_sha256: staged.content_sha256,
            size: staged.size,
          });
        },
      );
      uploadDone();
    });
    done();
  };
}
