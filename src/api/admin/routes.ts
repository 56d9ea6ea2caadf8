/**
 * The ledger view (`/admin/*`), served beside Bull Board by the API process.
 *
 * GET  /admin/login            the token form (no session needed)
 * POST /admin/login            form `token`: an operator token (admin token or
 *                              an `operator` API token) -> 303 /admin/ledger
 *                              with the session cookie (session.ts); any other
 *                              token -> 401 and the form again, no cookie
 * POST /admin/logout           clears the cookie
 * GET  /admin/ledger           operations, newest first: `workspace_id`,
 *                              `state`, `stuck_minutes` (no progress for N
 *                              minutes, runtime/stuck.ts), keyset `cursor`
 * GET  /admin/ledger/operations/:id   one operation (ledger-read.ts, pages.ts)
 * POST /admin/ledger/operations/:id/recover   form `expected_action`: runs
 *                              `recoverOperation` — the reaper's own claim,
 *                              action and release — only if that is still the
 *                              legal action (store/recovery.ts); otherwise the
 *                              typed conflict, status 409, shown on the page
 * POST /admin/ledger/operations/:id/resolve   form `kind`, `step_key`,
 *                              `resolution`: the operator resolution of an
 *                              unknown step (runtime/operator-resolve.ts),
 *                              checked against a fresh observation
 * GET  /admin/ledger/deletions workspace deletions with progress and counts
 * GET  /admin/ledger/live.js   the live-update script (live.ts)
 * Every page answers `?fragment=1` with its live region alone (live.js).
 *
 * Without a valid session: pages redirect to the login form (303), fragments
 * and posts answer 401 — and nothing about the ledger is read first.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { OPERATION_STATES, RECOVERY_ACTIONS, STEP_KINDS, type RecoveryAction, type StepKind } from '../../domain/vocab';
import { isTaskLedgerError } from '../../domain/errors';
import { createProviderRegistry } from '../../providers/registry';
import { recoverOperation } from '../../runtime/recover';
import { resolveStepByOperator, type OperatorResolution } from '../../runtime/operator-resolve';
import { findStuckOperations, type StuckOperation } from '../../runtime/stuck';
import { defaultStepHandlers } from '../../kinds/registry';
import type { Principal } from '../../store/types';
import { isOperator, isUuid, principalForToken } from '../auth';
import type { ApiDeps } from '../deps';
import { listOperations, readOperation } from '../operation-view';
import { esc, liveRegion, page } from './html';
import { legalActionNow, listDeletions, operationExtras } from './ledger-read';
import { LIVE_JS } from './live';
import {
  BUTTON_ACTIONS,
  deletionsTable,
  listFilters,
  listFragmentSrc,
  loginPage,
  operationDetail,
  operationsTable,
  type ListView,
  type Notice,
} from './pages';
import {
  CLEAR_SESSION_COOKIE,
  cookieValue,
  issueSession,
  SESSION_COOKIE,
  sessionCookie,
  sessionKeys,
  sessionPrincipal,
} from './session';

/** Why 50: one screen; the next page is a link. `limit` (1-200, as the REST list) overrides it. */
const PAGE_SIZE = 50;
const MAX_PAGE = 200;

declare module 'fastify' {
  interface FastifyRequest {
    /** The operator behind the admin session cookie; set by the ledger view's guard. */
    adminPrincipal: Principal | null;
  }
}

const html = (reply: FastifyReply, status: number, body: string): FastifyReply =>
  reply
    .status(status)
    .header('content-type', 'text/html; charset=utf-8')
    .header('cache-control', 'no-store')
    .send(body);

function form(body: unknown): Record<string, string> {
  return body !== null && typeof body === 'object' ? (body as Record<string, string>) : {};
}

const isFragment = (req: FastifyRequest): boolean => (req.query as Record<string, unknown>).fragment === '1';

export function adminRoutes(deps: ApiDeps) {
  const keys = sessionKeys(deps.config.adminToken);
  const effects = {
    db: deps.db,
    dataDir: deps.config.dataDir,
    providers: createProviderRegistry({ timeoutMs: deps.config.effectTimeoutMs }),
    log: deps.log,
    timeoutMs: deps.config.effectTimeoutMs,
  };
  const observer = deps.stepObserver ?? { effects, handlers: defaultStepHandlers };

  /** The operator of this request's session, or null (never reads anything else). */
  const sessionOf = (req: FastifyRequest): Promise<Principal | null> =>
    sessionPrincipal(deps.db, keys, cookieValue(req.headers.cookie, SESSION_COOKIE), Date.now());

  async function guard(req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> {
    const principal = await sessionOf(req);
    if (principal) {
      req.adminPrincipal = principal;
      return undefined;
    }
    if (req.method === 'GET' && !isFragment(req)) return reply.redirect('/admin/login', 303);
    return reply.status(401).header('content-type', 'text/plain; charset=utf-8').send('unauthorized');
  }

  async function detailPage(id: string, reply: FastifyReply, status: number, n: Notice | null, fragment: boolean) {
    const op = await readOperation(deps.db, id);
    const extras = op ? await operationExtras(deps.db, id) : null;
    if (!op || !extras)
      return html(reply, 404, fragment ? 'not found' : page('Not found', '<h1>No such operation</h1>'));
    const inner = operationDetail(op, extras, await legalActionNow(deps.db, id));
    if (fragment) return html(reply, 200, inner);
    const noticeHtml = n
      ? `<div class="notice ${n.kind}" role="status" id="notice" data-notice="${n.kind}">${esc(n.text)}</div>`
      : '';
    return html(
      reply,
      status,
      page(`Operation ${id}`, noticeHtml + liveRegion(`/admin/ledger/operations/${id}?fragment=1`, inner)),
    );
  }

  return async function routes(app: FastifyInstance): Promise<void> {
    app.decorateRequest('adminPrincipal', null);
    app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_req, body, done) => {
      done(null, Object.fromEntries(new URLSearchParams(String(body))));
    });

    app.get('/admin', (_req, reply) => reply.redirect('/admin/ledger', 303));
    app.get('/admin/login', (_req, reply) => html(reply, 200, page('Login', loginPage(null), { nav: false })));
    app.post('/admin/login', async (req, reply) => {
      const token = form(req.body).token ?? null;
      const principal = await principalForToken(deps.db, deps.config.adminToken, token);
      if (!principal || !isOperator(principal)) {
        return html(reply, 401, page('Login', loginPage('That is not an operator token.'), { nav: false }));
      }
      return reply
        .header('set-cookie', sessionCookie(issueSession(keys, principal, Date.now())))
        .redirect('/admin/ledger', 303);
    });
    app.post('/admin/logout', (_req, reply) =>
      reply.header('set-cookie', CLEAR_SESSION_COOKIE).redirect('/admin/login', 303),
    );
    app.get('/admin/ledger/live.js', (_req, reply) =>
      reply.header('content-type', 'text/javascript; charset=utf-8').send(LIVE_JS),
    );

    await app.register((scope, _opts, done) => {
      scope.addHook('onRequest', guard);

      scope.get<{ Querystring: Record<string, string | undefined> }>('/admin/ledger', async (req, reply) => {
        const q = req.query;
        const filter: ListView['filter'] = {};
        if (q.workspace_id && isUuid(q.workspace_id)) filter.workspace_id = q.workspace_id;
        if (q.state && (OPERATION_STATES as readonly string[]).includes(q.state)) filter.state = q.state;
        const minutes = q.stuck_minutes === undefined || q.stuck_minutes === '' ? NaN : Number(q.stuck_minutes);
        if (Number.isFinite(minutes) && minutes >= 0) filter.stuck_minutes = Math.floor(minutes);
        const limit = Number(q.limit);
        if (Number.isInteger(limit) && limit >= 1 && limit <= MAX_PAGE) filter.limit = limit;
        const view: ListView = { rows: [], stuck: null, nextCursor: null, filter, states: OPERATION_STATES };
        if (filter.stuck_minutes !== undefined) {
          const stuck = await findStuckOperations(deps.db, {
            stuckAfterMs: filter.stuck_minutes * 60_000,
            workspaceId: filter.workspace_id,
          });
          view.stuck = new Map<string, StuckOperation>(stuck.map((s) => [s.operation_id, s]));
          view.rows = stuck
            .filter((s) => filter.state === undefined || s.state === filter.state)
            .map((s) => ({
              id: s.operation_id,
              workspace_id: s.workspace_id,
              task_id: s.task_id,
              state: s.state,
              updated_at: s.since,
            }));
        } else {
          let page;
          try {
            page = await listOperations(deps.db, {
              state: filter.state,
              workspaceId: filter.workspace_id,
              limit: filter.limit ?? PAGE_SIZE,
              cursor: q.cursor || undefined,
            });
          } catch (err) {
            if (!isTaskLedgerError(err, 'invalid_request')) throw err;
            page = await listOperations(deps.db, {
              state: filter.state,
              workspaceId: filter.workspace_id,
              limit: filter.limit ?? PAGE_SIZE,
            });
          }
          view.rows = page.operations;
          view.nextCursor = page.next_cursor;
        }
        const table = operationsTable(view);
        if (isFragment(req)) return html(reply, 200, table);
        return html(
          reply,
          200,
          page('Operations', listFilters(view) + liveRegion(listFragmentSrc(filter, q.cursor || undefined), table)),
        );
      });

      scope.get<{ Params: { id: string } }>('/admin/ledger/operations/:id', async (req, reply) => {
        if (!isUuid(req.params.id)) return html(reply, 404, page('Not found', '<h1>No such operation</h1>'));
        return detailPage(req.params.id, reply, 200, null, isFragment(req));
      });

      scope.post<{ Params: { id: string } }>('/admin/ledger/operations/:id/recover', async (req, reply) => {
        const id = req.params.id;
        const expected = form(req.body).expected_action;
        if (!isUuid(id)) return html(reply, 404, page('Not found', '<h1>No such operation</h1>'));
        if (!expected || !(RECOVERY_ACTIONS as readonly string[]).includes(expected) || !BUTTON_ACTIONS.has(expected)) {
          return detailPage(
            id,
            reply,
            400,
            { kind: 'conflict', text: `not an action this page runs: ${expected ?? '(none)'}` },
            false,
          );
        }
        const principal = req.adminPrincipal!;
        const out = await recoverOperation(
          {
            effects,
            handlers: defaultStepHandlers,
            queues: deps.recoveryQueues ?? null,
            log: deps.log,
            actor: `operator:${principal.principal_id}`,
          },
          id,
          { expectedAction: expected as RecoveryAction },
        );
        if (out.action === null) {
          const text =
            out.skipped === 'creation_state_conflict' || out.skipped === 'stale_claim'
              ? `Conflict: ${out.detail ?? out.skipped}`
              : `Nothing ran (${out.skipped ?? 'no action'}): ${out.detail ?? ''}`;
          return detailPage(id, reply, 409, { kind: 'conflict', text }, false);
        }
        const text =
          out.detail === null
            ? `${out.action} ran${out.progressed ? ' and changed the ledger' : ' (no ledger change)'}.`
            : `${out.action} was refused by the Store: ${out.detail}`;
        return detailPage(
          id,
          reply,
          out.detail === null ? 200 : 409,
          { kind: out.detail === null ? 'done' : 'conflict', text },
          false,
        );
      });

      scope.post<{ Params: { id: string } }>('/admin/ledger/operations/:id/resolve', async (req, reply) => {
        const id = req.params.id;
        const f = form(req.body);
        if (!isUuid(id)) return html(reply, 404, page('Not found', '<h1>No such operation</h1>'));
        const resolution = f.resolution as OperatorResolution;
        if (
          !(STEP_KINDS as readonly string[]).includes(f.kind ?? '') ||
          !f.step_key ||
          !['succeeded', 'retry_wait', 'failed'].includes(resolution)
        ) {
          return detailPage(
            id,
            reply,
            400,
            { kind: 'conflict', text: 'the resolve form needs kind, step_key and resolution' },
            false,
          );
        }
        try {
          const r = await resolveStepByOperator(
            observer,
            {
              operationId: id,
              kind: f.kind as StepKind,
              stepKey: f.step_key,
              actor: `operator:${req.adminPrincipal!.principal_id}`,
            },
            resolution,
          );
          return detailPage(
            id,
            reply,
            200,
            { kind: 'done', text: `${f.kind}/${f.step_key} resolved: ${r.state}` },
            false,
          );
        } catch (err) {
          if (!isTaskLedgerError(err)) throw err;
          return detailPage(
            id,
            reply,
            409,
            { kind: 'conflict', text: `Conflict (${err.code}): ${err.message}` },
            false,
          );
        }
      });

      scope.get('/admin/ledger/deletions', async (req, reply) => {
        const table = deletionsTable(await listDeletions(deps.db, 200));
        if (isFragment(req)) return html(reply, 200, table);
        return html(
          reply,
          200,
          page(
            'Workspace deletions',
            `<h1>Workspace deletions</h1>${liveRegion('/admin/ledger/deletions?fragment=1', table)}`,
          ),
        );
      });
      done();
    });
  };
}
