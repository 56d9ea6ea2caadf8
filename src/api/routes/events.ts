/**
 * GET /api/v1/workspaces/:id/events?after=<seq>&limit=   the workspace's
 * delivered outbox events in sequence order: `{events:[{seq, event_id, type,
 * task_id, revision, payload, delivered_at}], next_after}`. Only delivered
 * rows are returned, and the page stops at the first undelivered event after
 * `after`: a consumer that pages with `after = next_after` therefore never
 * skips an event that is delivered later. Operators and members of the
 * workspace; 404 otherwise.
 */
import type { FastifyPluginCallback } from 'fastify';
import { parseCanonical } from '../../canonical/canonical-json';
import { readRows } from '../../db/tx';
import { workspaceAccess } from '../auth';
import type { ApiDeps } from '../deps';
import { notFound } from '../errors';
import { closed } from '../validation';

/** Why 100/1000: a page is one cheap indexed range read; 1000 bounds the response size. */
const DEFAULT_LIMIT = 100;
const MAX_LIMIT = 1000;

const eventsQuery = closed({
  after: { type: 'integer', minimum: 0, default: 0 },
  limit: { type: 'integer', minimum: 1, maximum: MAX_LIMIT, default: DEFAULT_LIMIT },
});

interface OutboxRow {
  seq: string | number;
  event_id: string;
  type: string;
  task_id: string;
  revision: number | string;
  payload_json: string;
  delivered_at: Date | null;
}

function payloadOf(text: string): unknown {
  try {
    return parseCanonical(text);
  } catch {
    return { unparsable_document: text };
  }
}

export function eventRoutes(deps: ApiDeps): FastifyPluginCallback {
  const { db } = deps;
  return function routes(app, _opts, done): void {
    app.get<{ Params: { id: string }; Querystring: { after: number; limit: number } }>(
      '/workspaces/:id/events',
      { onRequest: workspaceAccess, schema: { querystring: eventsQuery } },
      async (req) => {
        const workspaceId = req.params.id;
        const ws = await readRows(db, 'SELECT id FROM workspaces WHERE id = ?', [workspaceId]);
        if (!ws[0]) throw notFound('workspace');
        const rows = await readRows<OutboxRow>(
          db,
          `SELECT seq, event_id, type, task_id, revision, payload_json, delivered_at FROM event_outbox
            WHERE workspace_id = ? AND seq > ? ORDER BY seq LIMIT ?`,
          [workspaceId, req.query.after, req.query.limit],
        );
        const firstPending = rows.findIndex((r) => r.delivered_at === null);
        const delivered = firstPending === -1 ? rows : rows.slice(0, firstPending);
        const events = delivered.map((r) => ({
          seq: Number(r.seq),
          event_id: r.event_id,
          type: r.type,
          task_id: r.task_id,
          revision: Number(r.revision),
          payload: payloadOf(r.payload_json),
          delivered_at: r.delivered_at,
        }));
        return { events, next_after: events.length ? events[events.length - 1]!.seq : req.query.after };
      },
    );
    done();
  };
}
