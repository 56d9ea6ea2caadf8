/**
 * `taskledger ops list [--state S] [--workspace W] [--limit N] [--json]`,
 * `taskledger ops list --stuck [--minutes M]` (what has not moved for M
 * minutes — TASKLEDGER_STUCK_AFTER_MS by default — and the one legal action
 * it waits for) and `taskledger ops show <operation-id> [--json]`: an
 * operator's view of
 * creation operations. `--state` takes an operation state, or a step state
 * (e.g. `unknown`) to list operations that have a step in it. `show` prints
 * the timeline: steps with their claims, generations and evidence hashes,
 * recovery claim, external-ID release (when there is one), cleanup jobs,
 * launch dispatch claims and events. Reads only.
 */
import { parseArgs } from 'node:util';
import { listOperations, readOperation } from '../api/operation-view';
import { readRows } from '../db/tx';
import { OPERATION_STATES, STEP_STATES } from '../domain/vocab';
import { findStuckOperations } from '../runtime/stuck';
import type { UnresolvedNote } from '../store/step-notes';
import { withCliDb } from './cli-db';
import { EXIT } from './usage';

type Row = Record<string, unknown>;

/** Any column value as display text. */
function str(v: unknown): string {
  if (v === null || v === undefined) return '-';
  if (v instanceof Date) return v.toISOString();
  if (typeof v === 'object') return JSON.stringify(v);
  if (typeof v === 'string') return v;
  return typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint' ? v.toString() : '?';
}
const short = (v: unknown, n = 12): string => str(v).slice(0, n);
const time = (v: unknown): string => str(v);

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

async function list(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      state: { type: 'string' },
      workspace: { type: 'string' },
      limit: { type: 'string' },
      json: { type: 'boolean' },
      stuck: { type: 'boolean' },
      minutes: { type: 'string' },
    },
    strict: true,
  });
  if (values.stuck) return listStuck(values);
  const state = values.state;
  const isOpState = state !== undefined && (OPERATION_STATES as readonly string[]).includes(state);
  const isStepState = state !== undefined && (STEP_STATES as readonly string[]).includes(state);
  if (state !== undefined && !isOpState && !isStepState) {
    console.error(
      `taskledger ops list: unknown state "${state}" (operation: ${OPERATION_STATES.join(', ')}; step: ${STEP_STATES.join(', ')})`,
    );
    return EXIT.USAGE;
  }
  const limit = Number(values.limit ?? 50);
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) {
    console.error('taskledger ops list: --limit must be 1..1000');
    return EXIT.USAGE;
  }
  return withCliDb('ops', 2, async (db) => {
    let ops: Row[];
    if (isStepState) {
      ops = await readRows<Row>(
        db,
        `SELECT o.id, o.workspace_id, o.task_id, o.state, o.start_policy, o.result_outcome, o.abort_cause, o.created_at
           FROM task_creation_operations o
          WHERE EXISTS (SELECT 1 FROM task_creation_steps s WHERE s.operation_id = o.id AND s.state = ?)
            ${values.workspace ? 'AND o.workspace_id = ?' : ''}
          ORDER BY o.created_at DESC, o.id DESC LIMIT ${limit}`,
        [state, ...(values.workspace ? [values.workspace] : [])],
      );
    } else {
      ops = (await listOperations(db, { state, workspaceId: values.workspace, limit })).operations;
    }
    if (values.json) {
      console.log(JSON.stringify(ops, null, 2));
      return EXIT.OK;
    }
    if (ops.length === 0) {
      console.log('no creation operations match');
      return EXIT.OK;
    }
    const rows = [['OPERATION', 'STATE', 'TASK', 'WORKSPACE', 'OUTCOME', 'CREATED']];
    for (const o of ops) {
      rows.push([
        str(o.id),
        str(o.state),
        short(o.task_id, 36),
        short(o.workspace_id, 8),
        str(o.result_outcome ?? o.abort_cause ?? '-'),
        time(o.created_at),
      ]);
    }
    console.log(table(rows));
    return EXIT.OK;
  });
}

/** `ops list --stuck [--minutes M]`: what has not moved, and the one legal action it waits for. */
async function listStuck(values: { workspace?: string; limit?: string; json?: boolean; minutes?: string }) {
  const minutes = values.minutes === undefined ? null : Number(values.minutes);
  if (minutes !== null && (!Number.isFinite(minutes) || minutes < 0 || minutes > 100_000)) {
    console.error('taskledger ops list: --minutes must be a number from 0 to 100000');
    return EXIT.USAGE;
  }
  const limit = Number(values.limit ?? 200);
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) {
    console.error('taskledger ops list: --limit must be 1..1000');
    return EXIT.USAGE;
  }
  const stuckAfterMs =
    minutes !== null ? Math.round(minutes * 60_000) : Number(process.env.TASKLEDGER_STUCK_AFTER_MS ?? 600_000);
  return withCliDb('ops', 2, async (db) => {
    const stuck = await findStuckOperations(db, { stuckAfterMs, workspaceId: values.workspace, limit });
    if (values.json) {
      console.log(JSON.stringify(stuck, null, 2));
      return EXIT.OK;
    }
    if (stuck.length === 0) {
      console.log(`nothing has been stuck for ${Math.round(stuckAfterMs / 60_000)} minutes or more`);
      return EXIT.OK;
    }
    const rows = [['OPERATION', 'STATE', 'WORKSPACE', 'SINCE', 'ACTION', 'WAITING FOR']];
    for (const o of stuck) {
      rows.push([o.operation_id, o.state, short(o.workspace_id, 8), time(o.since), o.action ?? '-', o.waiting_for]);
    }
    console.log(table(rows));
    return EXIT.OK;
  });
}

async function show(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: { json: { type: 'boolean' } },
    allowPositionals: true,
    strict: true,
  });
  const id = positionals[0];
  if (!id || !/^[0-9a-f-]{36}$/.test(id)) {
    console.error('usage: taskledger ops show <operation-id>');
    return EXIT.USAGE;
  }
  return withCliDb('ops', 2, async (db) => {
    const op = await readOperation(db, id);
    if (!op) {
      console.error(`taskledger ops show: no creation operation ${id}`);
      return EXIT.FAILED;
    }
    const cleanup = await readRows<Row>(
      db,
      'SELECT id, kind, reason, state, generation, attempt, proof_sha256, error_code, created_at FROM task_resource_cleanup_jobs WHERE operation_id = ? ORDER BY created_at',
      [id],
    );
    const dispatch = await readRows<Row>(
      db,
      'SELECT id, session_id, state, generation, attempt, idempotency_key, evidence_sha256, error_code, created_at FROM task_launch_dispatch_claims WHERE creation_operation_id = ?',
      [id],
    );
    const events = await readRows<Row>(
      db,
      'SELECT seq, event_id, type, revision, created_at, delivered_at FROM event_outbox WHERE operation_id = ? ORDER BY seq',
      [id],
    );
    if (values.json) {
      console.log(JSON.stringify({ ...op, cleanup_jobs: cleanup, dispatch_claims: dispatch, events }, null, 2));
      return EXIT.OK;
    }
    console.log(`operation  ${str(op.id)}  ${str(op.state)}`);
    console.log(
      `task       ${str(op.task_id)}   workspace ${str(op.workspace_id)}   start policy ${str(op.start_policy)}`,
    );
    console.log(`manifest   ${str(op.manifest_hash)}`);
    console.log(`actor      ${str(op.actor_binding_hash)}`);
    console.log(
      `created    ${time(op.created_at)}   completing ${time(op.completing_at)}   completed ${time(op.completed_at)}   aborted ${time(op.aborted_at)}`,
    );
    console.log(
      `outcome    ${str(op.result_outcome ?? '-')}   event ${str(op.result_event_id ?? '-')}   abort cause ${str(op.abort_cause ?? '-')}`,
    );
    const recovery = (op.recovery ?? {}) as Row;
    console.log(
      `recovery   ${str(recovery.action ?? '-')}   generation ${str(recovery.generation ?? 0)}   owner ${str(recovery.owner ?? '-')}   lease until ${time(recovery.lease_expires_at)}`,
    );
    const release = (op.release ?? {}) as Row;
    if (release.id != null || release.operation_id != null || release.applied === true) {
      console.log(
        `release    ${str(release.id)}   ${str(release.state)}   holder ${str(release.holder_state)}   by ${str(release.requested_by)}   requested ${time(release.requested_at)}   completed ${time(release.completed_at)}   generation ${str(release.generation)}   applied ${str(release.applied)}`,
      );
    }
    const steps = (op.steps as Row[]) ?? [];
    const rows = [
      ['KIND', 'KEY', 'STATE', 'GEN', 'TRY', 'LEASE OWNER', 'EVIDENCE', 'COMPENSATION', 'CLEANUP', 'ERROR'],
    ];
    for (const s of steps) {
      const err = s.error as { code?: unknown } | null;
      rows.push([
        str(s.kind),
        short(s.step_key, 16),
        str(s.state),
        str(s.generation),
        str(s.attempt),
        short(s.lease_owner, 20),
        short(s.evidence_sha256),
        str(s.compensation_state),
        short(s.cleanup_job_id, 8),
        short(err?.code, 24),
      ]);
    }
    console.log(`\nsteps\n${table(rows)}`);
    const notes = steps.flatMap((s) => {
      const err = s.error as { code?: unknown; detail?: unknown } | null;
      if (err?.code !== 'unobservable' && err?.code !== 'conflict') return [];
      const n = err.detail as Partial<UnresolvedNote> | null;
      return [
        `  ${str(s.kind)}/${short(s.step_key, 16)}: ${str(err.code)}, ${str(n?.observations)} observation(s) since ${str(n?.first_observed_at)}: ${str(n?.reason)}`,
      ];
    });
    if (notes.length)
      console.log(`\nundecided (recovery looks again with backoff; docs/recovery.md)\n${notes.join('\n')}`);
    if (cleanup.length)
      console.log(
        `\ncleanup jobs\n${table([['JOB', 'KIND', 'REASON', 'STATE', 'GEN', 'PROOF', 'ERROR'], ...cleanup.map((c) => [str(c.id), str(c.kind), str(c.reason), str(c.state), str(c.generation), short(c.proof_sha256), short(c.error_code ?? '-', 24)])])}`,
      );
    if (dispatch.length)
      console.log(
        `\nlaunch dispatch\n${table([['CLAIM', 'SESSION', 'STATE', 'GEN', 'EVIDENCE', 'ERROR'], ...dispatch.map((d) => [str(d.id), str(d.session_id), str(d.state), str(d.generation), short(d.evidence_sha256), short(d.error_code ?? '-', 24)])])}`,
      );
    if (events.length)
      console.log(
        `\nevents\n${table([['SEQ', 'TYPE', 'REV', 'EVENT', 'DELIVERED'], ...events.map((e) => [str(e.seq), str(e.type), str(e.revision), str(e.event_id), time(e.delivered_at)])])}`,
      );
    return EXIT.OK;
  });
}

export async function opsCommand(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  try {
    if (sub === 'list') return await list(rest);
    if (sub === 'show') return await show(rest);
  } catch (err) {
    if ((err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      console.error(`taskledger ops: ${(err as Error).message}`);
      return EXIT.USAGE;
    }
    throw err;
  }
  console.error(
    'usage: taskledger ops list [--state S] [--workspace W] [--limit N] [--json] | ops list --stuck [--minutes M] [--workspace W] [--json] | ops show <operation-id> [--json]',
  );
  return EXIT.USAGE;
}
