/**
 * The database server kills every fleet connection, again and again, while
 * creations run end to end — and every creation still ends, exactly once.
 *
 * An API process and two worker processes (`taskledger start`, every worker
 * role including cleanup) run against the test database; the test process
 * kills all of their connections from the server side every ~0.5 s
 * (`pg_terminate_backend` of their application_name on PostgreSQL, `KILL
 * CONNECTION` of their dedicated user on MySQL/MariaDB). Producers create
 * tasks over REST with external IDs and ask again whenever an answer is lost
 * (503 or a dropped response), and once more afterwards as if the answer had
 * been lost. A quarter of the creations link a pull request the provider
 * does not know (404), so their creations abort and compensate while the
 * killing goes on.
 *
 * Then: no fleet process died; each external ID of a good creation has one
 * task and one completed operation, and the answer the producer got names
 * it; every 404 creation aborted with its effects compensated; one
 * task.created per completed task; every worktree and branch has an owner;
 * every launch is claimed; `verify` finds no drift. Both dialects.
 *
 * Longer run: TASKLEDGER_CONNKILL_CREATIONS=200 npx vitest run test/fleet/connection-kill.test.ts
 * (TASKLEDGER_CONNKILL_EVERY_MS sets the kill interval; docs/recovery.md).
 */
import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { verifyLedger } from '../../src/verify/run';
import { realDeps } from '../compensation/support';
import { sql, useTestDb } from '../support/db';
import {
  creationBody,
  describeChild,
  exited,
  expectAbortedUndone,
  expectDiskOwned,
  ownersOf,
  ROLES,
  spawnWorker,
  startCrashWorld,
  stopCrashWorld,
  type CrashWorld,
} from './sigkill-support';
import type { BenchChild } from '../../src/bench/processes';

const t = useTestDb();
/** A separate pool for the killer and for inspection: the fleet's connections are the only ones killed. */
const CREATIONS = Number(process.env.TASKLEDGER_CONNKILL_CREATIONS ?? 12);
const KILL_EVERY_MS = Number(process.env.TASKLEDGER_CONNKILL_EVERY_MS ?? 500);
/** Every fourth creation links a pull request the provider answers 404 for. */
const missingPr = (i: number) => i % 4 === 3;
const LEASE_MS = 8000;
const SWEEP_MS = 500;
const APP_NAME = `tl-connkill-${process.pid}`;
const DB_USER = `tl_ck_${process.pid}`;
const DB_PASSWORD = 'connkill';
let w: CrashWorld | undefined;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

/** The fleet's database URL: on MySQL a dedicated user (MySQL has no application_name to pick connections by). */
function fleetDbUrl(): string {
  const url = new URL(process.env.TASKLEDGER_DB_URL!);
  if (t.db.dialect === 'mysql') {
    url.username = DB_USER;
    url.password = DB_PASSWORD;
  }
  return url.toString();
}

async function createFleetUser(): Promise<void> {
  if (t.db.dialect !== 'mysql') return;
  const database = new URL(process.env.TASKLEDGER_DB_URL!).pathname.slice(1);
  for (const host of ['%', 'localhost', '127.0.0.1']) {
    await sql(t.db, `CREATE USER IF NOT EXISTS '${DB_USER}'@'${host}' IDENTIFIED BY '${DB_PASSWORD}'`);
    await sql(t.db, `GRANT ALL PRIVILEGES ON \`${database}\`.* TO '${DB_USER}'@'${host}'`);
  }
}

async function dropFleetUser(): Promise<void> {
  if (t.db.dialect !== 'mysql') return;
  for (const host of ['%', 'localhost', '127.0.0.1']) await sql(t.db, `DROP USER IF EXISTS '${DB_USER}'@'${host}'`);
}

/** Kills every connection of the fleet now; returns how many. */
async function killFleetConnections(): Promise<number> {
  if (t.db.dialect === 'postgres') {
    const rows = await sql<{ killed: boolean }>(
      t.db,
      'SELECT pg_terminate_backend(pid) AS killed FROM pg_stat_activity WHERE application_name = ?',
      [APP_NAME],
    );
    return rows.filter((r) => r.killed).length;
  }
  const rows = await sql<{ id: number | string }>(
    t.db,
    'SELECT id FROM information_schema.processlist WHERE user = ?',
    [DB_USER],
  );
  let killed = 0;
  for (const r of rows) {
    // A connection that closed in between is simply gone already.
    await sql(t.db, `KILL CONNECTION ${Number(r.id)}`).then(
      () => killed++,
      () => undefined,
    );
  }
  return killed;
}

beforeAll(async () => {
  w = await startCrashWorld(t.db, CREATIONS);
  await createFleetUser();
});
afterAll(async () => {
  await stopCrashWorld(w);
  await dropFleetUser();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Answer {
  status: number;
  body: Record<string, any>;
  /** Answers lost on the way: 503s and dropped responses. */
  lost: number;
}

describe('the database server killing every fleet connection in a loop', () => {
  it(
    'loses no creation and duplicates none: every creation ends, the fleet keeps running',
    { timeout: 120_000 + CREATIONS * 4_000 },
    async () => {
      const world = w!;
      const ws = world.ws;
      const port = await freePort();
      const env = {
        TASKLEDGER_DB_URL: fleetDbUrl(),
        TASKLEDGER_DB_APPLICATION_NAME: APP_NAME,
        TASKLEDGER_PORT: String(port),
      };
      const children: BenchChild[] = [
        spawnWorker(world, 'api', { leaseMs: LEASE_MS, sweepMs: SWEEP_MS, roles: ['api'], env }),
        spawnWorker(world, 'worker-1', { leaseMs: LEASE_MS, sweepMs: SWEEP_MS, roles: [...ROLES, 'cleanup'], env }),
        spawnWorker(world, 'worker-2', { leaseMs: LEASE_MS, sweepMs: SWEEP_MS, roles: [...ROLES, 'cleanup'], env }),
      ];
      await Promise.all(children.map((c) => c.ready));
      const dump = async () => {
        const ops = await sql<{ id: string; state: string }>(
          t.db,
          'SELECT id, state FROM task_creation_operations WHERE workspace_id = ? ORDER BY id',
          [ws.workspaceId],
        );
        const steps = await sql<{
          operation_id: string;
          kind: string;
          state: string;
          error_code: string | null;
          error_json: unknown;
        }>(
          t.db,
          `SELECT operation_id, kind, state, error_code, error_json FROM task_creation_steps
            WHERE workspace_id = ? AND state NOT IN ('succeeded', 'armed')`,
          [ws.workspaceId],
        );
        // What the wait below counts besides open operations: undelivered events and launches not yet claimed.
        const events = await sql<{ operation_id: string; type: string; delivery_attempts: number }>(
          t.db,
          `SELECT operation_id, type, delivery_attempts FROM event_outbox
            WHERE workspace_id = ? AND delivered_at IS NULL`,
          [ws.workspaceId],
        );
        const launches = await sql<{ operation_id: string; state: string | null; generation: number | null }>(
          t.db,
          `SELECT e.operation_id, c.state, c.generation FROM event_outbox e
             LEFT JOIN task_launch_dispatch_claims c ON c.task_id = e.task_id
            WHERE e.workspace_id = ? AND (c.id IS NULL OR c.state NOT IN ('succeeded', 'cancelled'))`,
          [ws.workspaceId],
        );
        return [
          `operations: ${ops.map((o) => `${o.id.slice(0, 8)}=${o.state}`).join(' ')}`,
          ...events.map(
            (e) => `  ${e.operation_id.slice(0, 8)} event ${e.type} undelivered (${e.delivery_attempts} tries)`,
          ),
          ...launches.map(
            (l) => `  ${l.operation_id.slice(0, 8)} launch claim ${l.state ?? 'none'} g${l.generation ?? '-'}`,
          ),
          ...steps.map(
            (s) =>
              `  ${s.operation_id.slice(0, 8)} ${s.kind} ${s.state}` +
              (s.error_code ? ` ${s.error_code} ${JSON.stringify(s.error_json)}` : ''),
          ),
          ...children.map(describeChild),
        ].join('\n');
      };

      // --- the killer -------------------------------------------------------------------------------------------
      let killing = true;
      let kills = 0;
      let rounds = 0;
      const killer = (async () => {
        while (killing) {
          await sleep(KILL_EVERY_MS / 2 + Math.random() * KILL_EVERY_MS);
          if (!killing) break;
          kills += await killFleetConnections();
          rounds++;
        }
      })();

      // --- producers: ask until an answer arrives, with the same external ID ------------------------------------
      const body = (i: number) => {
        const b = creationBody(world, i);
        b.external_id = `connkill-${i}`;
        if (missingPr(i)) {
          b.contributions = (b.contributions as Record<string, unknown>[]).map((c) => ({
            ...c,
            contribution_id: String(9000 + i),
          }));
        }
        return b;
      };
      const produce = async (i: number): Promise<Answer> => {
        let lost = 0;
        const deadline = Date.now() + 60_000;
        for (;;) {
          if (Date.now() > deadline) throw new Error(`creation ${i}: no answer within 60 s (${lost} lost)`);
          let res: Response;
          try {
            res = await fetch(`http://127.0.0.1:${port}/api/v1/tasks?wait_ms=0`, {
              method: 'POST',
              headers: { 'content-type': 'application/json', authorization: `Bearer ${ws.token}` },
              body: JSON.stringify(body(i)),
            });
          } catch {
            lost++;
            await sleep(100);
            continue;
          }
          const json = (await res.json()) as Record<string, any>;
          if (res.status === 503) {
            expect(res.headers.get('retry-after')).toBe('1');
            expect(['database_unavailable', 'commit_outcome_unknown']).toContain(json.error);
            lost++;
            await sleep(100 + Math.random() * 200);
            continue;
          }
          return { status: res.status, body: json, lost };
        }
      };
      const answers: Answer[] = [];
      // Two at a time, each pair after the next kill round, so creations start all through the killing.
      for (let i = 0; i < CREATIONS; i += 2) {
        const round = rounds;
        while (rounds === round) await sleep(20);
        const batch = Array.from({ length: Math.min(2, CREATIONS - i) }, (_, k) => produce(i + k));
        answers.push(...(await Promise.all(batch)));
      }
      for (const [i, a] of answers.entries()) {
        // A 404 creation whose first answer was lost may have aborted before its producer asked again: the replay
        // is then the aborted operation's own typed refusal, naming it.
        const abortedReplay = missingPr(i) && a.lost > 0 && a.status === 422 && a.body.error === 'creation_aborted';
        if (abortedReplay) a.body.operation_id = a.body.detail.operation_id;
        else if (![200, 202].includes(a.status)) {
          expect.fail(`creation ${i}: ${a.status} ${JSON.stringify(a.body)}\n${await dump()}`);
        }
      }
      // A producer that lost its answer asks again, still under the killer: the same task, never a second one.
      for (let i = 0; i < CREATIONS; i += 4) {
        const good = [i, i + 1, i + 2].filter((k) => k < CREATIONS && !missingPr(k));
        const again = await Promise.all(good.map((k) => produce(k)));
        again.forEach((a, n) => {
          const k = good[n]!;
          expect(a.status, `creation ${k} asked again: ${JSON.stringify(a.body)}`).toBe(200);
          expect(a.body.deduplicated).toBe(true);
          expect(a.body.task.id).toBe(answers[k]!.body.task.id);
        });
        answers.forEach((a, k) => (a.lost += good.includes(k) ? again[good.indexOf(k)]!.lost : 0));
      }

      // --- every creation ends, while the killing goes on -------------------------------------------------------
      const deadline = Date.now() + 60_000 + CREATIONS * 3_000;
      for (;;) {
        const [row] = await sql<{ open: number | string; undelivered: number | string; unclaimed: number | string }>(
          t.db,
          `SELECT
             (SELECT COUNT(*) FROM task_creation_operations WHERE workspace_id = ? AND state NOT IN ('completed', 'aborted')) AS open,
             (SELECT COUNT(*) FROM event_outbox WHERE workspace_id = ? AND delivered_at IS NULL) AS undelivered,
             (SELECT COUNT(*) FROM event_outbox e LEFT JOIN task_launch_dispatch_claims c ON c.task_id = e.task_id
               WHERE e.workspace_id = ? AND (c.id IS NULL OR c.state IN ('planned', 'retry_wait'))) AS unclaimed`,
          [ws.workspaceId, ws.workspaceId, ws.workspaceId],
        );
        if (Number(row!.open) + Number(row!.undelivered) + Number(row!.unclaimed) === 0) break;
        if (Date.now() > deadline) throw new Error(`creations did not all end under the killer:\n${await dump()}`);
        await sleep(200);
      }
      killing = false;
      await killer;
      process.stderr.write(
        `connection-kill (${t.db.dialect}): ${kills} connections killed in ${rounds} rounds; ` +
          `${answers.reduce((n, a) => n + a.lost, 0)} answers lost and asked again\n`,
      );

      // --- the fleet survived -----------------------------------------------------------------------------------
      for (const c of children) expect(exited(c), describeChild(c)).toBe(false);
      expect(kills).toBeGreaterThan(5);

      // --- one task per external ID; the answer names it --------------------------------------------------------
      const ops = await sql<{ id: string; task_id: string; state: string }>(
        t.db,
        'SELECT id, task_id, state FROM task_creation_operations WHERE workspace_id = ?',
        [ws.workspaceId],
      );
      const completed = new Set(ops.filter((o) => o.state === 'completed').map((o) => o.task_id));
      const stateOf = new Map(ops.map((o) => [o.id, o.state]));
      const good = Array.from({ length: CREATIONS }, (_, i) => i).filter((i) => !missingPr(i));
      // No second creation of any good external ID: as many completed operations as good creations.
      expect(completed.size).toBe(good.length);
      for (let i = 0; i < CREATIONS; i++) {
        const answer = answers[i]!.body;
        const tasks = await sql<{ id: string; creation_operation_id: string }>(
          t.db,
          'SELECT id, creation_operation_id FROM tasks WHERE workspace_id = ? AND external_id = ?',
          [ws.workspaceId, `connkill-${i}`],
        );
        if (missingPr(i)) {
          // Aborted: the task row is gone and its external ID free again.
          expect(stateOf.get(answer.operation_id as string), `creation ${i}`).toBe('aborted');
          expect(tasks, `creation ${i}`).toEqual([]);
          continue;
        }
        expect(tasks, `creation ${i}`).toHaveLength(1);
        expect(answer.task.id).toBe(tasks[0]!.id);
        expect(stateOf.get(tasks[0]!.creation_operation_id), `creation ${i}`).toBe('completed');
      }

      // --- aborted creations compensated; one task.created per completed task -----------------------------------
      await expectAbortedUndone(
        t.db,
        ops.filter((o) => o.state === 'aborted').map((o) => o.id),
      );
      const events = await sql<{ task_id: string; type: string }>(
        t.db,
        'SELECT task_id, type FROM event_outbox WHERE workspace_id = ?',
        [ws.workspaceId],
      );
      expect(events.every((e) => e.type === 'task.created')).toBe(true);
      expect(events.map((e) => e.task_id).sort()).toEqual([...completed].sort());

      // --- nothing on disk without an owner ---------------------------------------------------------------------
      const whose = async (path: string) => {
        const taskId = path.split('/').slice(-2)[0]!;
        const steps = await sql<Record<string, unknown>>(
          t.db,
          `SELECT s.kind, s.state, s.compensation_state, s.generation, s.error_code, o.state AS op_state, o.abort_cause
             FROM task_creation_steps s JOIN task_creation_operations o ON o.id = s.operation_id WHERE o.task_id = ?`,
          [taskId],
        );
        return `(task ${taskId}: ${JSON.stringify(steps)})\n${children.map(describeChild).join('\n')}`;
      };
      await expectDiskOwned(world, completed, whose);
      const { envRepos } = await ownersOf(world);
      expect(envRepos.filter((r) => completed.has(r.task_id))).toHaveLength(completed.size);

      // --- the ledger agrees with itself ------------------------------------------------------------------------
      const report = await verifyLedger(
        { db: t.db, effects: realDeps(t.db, ws.dataDir), handlers: defaultStepHandlers },
        { workspaceId: ws.workspaceId, observe: false, maxDrift: 50, pageSize: 50 },
      );
      expect(report.drift).toEqual([]);
    },
  );
});
