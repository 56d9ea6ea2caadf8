/**
 * The ceiling: the bare SQL transactions one DB-shape creation needs (a task
 * with a workspace attachment, a prepared session and a launch intent),
 * issued by a plain driver loop (`pg` / `mysql2` directly, no TypeORM, no
 * queues, no hashing or verification) on the same database at the same
 * concurrency. Each of C lanes runs whole creations one after another; each
 * transaction takes a pooled connection, runs BEGIN, its statements and
 * COMMIT, and gives the connection back — the Store's shape minus everything
 * but the locks (in the same global order) and the writes.
 *
 * Ten transactions per creation (CEILING_TRANSACTIONS), ~75 statements:
 *  1. Begin: workspace, token and workflow step FOR SHARE; insert the
 *     operation; the new task's key lock (PostgreSQL advisory lock, MySQL
 *     `lock_keys` row); identity FOR UPDATE; insert task, identity, task
 *     environment and three step rows.
 *  2-7. per step (workspace attachment, session prepare, launch intent) a
 *     claim and an effect transaction, each with the claim prefix (workspace
 *     FOR SHARE, operation, task, identity, steps FOR UPDATE) and its writes:
 *     the claim UPDATE; the group member row, the session and its marker, the
 *     launch-intent reads, and the step's success UPDATE with evidence.
 *  8. Complete A: prefix, the effect rows FOR SHARE, operation and task to `completing`.
 *  9. Complete B: prefix, the effect rows again, task/identity/operation
 *     `completed`, revision one and the `task.created` outbox row.
 *  10. Outbox delivery: the event's `delivered_at`.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import mysql from 'mysql2/promise';
import pg from 'pg';
import type { Dialect } from '../db/config';
import { forceIndexSql, forShareSql, isRetryableError, nowSql, toDialectSql } from '../db/dialect';
import { cpuPerCreation, trackCpu, type CpuBreakdown } from './cpu';
import type { BenchWorld } from './database';
import { summarize, type LatencySummary } from './stats';

export const CEILING_TRANSACTIONS = 10;

/** Why 10: the Store's own limit (src/db/tx.ts); a transaction that deadlocks ten times in a row is a bug here. */
const MAX_ATTEMPTS = 10;

type Param = string | number | boolean | null;
type Statement = [sql: string, params: Param[]];

interface RawConnection {
  query(sql: string, params: Param[]): Promise<void>;
  release(): void;
}

interface RawPool {
  acquire(): Promise<RawConnection>;
  end(): Promise<void>;
}

function pgPool(url: string, size: number): RawPool {
  const pool = new pg.Pool({ connectionString: url, max: size });
  return {
    async acquire() {
      const client = await pool.connect();
      return {
        async query(sql, params) {
          await client.query(toDialectSql('postgres', sql), params);
        },
        release: () => client.release(),
      };
    },
    end: () => pool.end(),
  };
}

function mysqlPool(url: string, size: number): RawPool {
  const pool = mysql.createPool({ uri: url.replace(/^mariadb:/, 'mysql:'), connectionLimit: size });
  const ready = new WeakSet<object>();
  return {
    async acquire() {
      const conn = await pool.getConnection();
      // Set once per connection, as the Store's READ COMMITTED (REPEATABLE READ's gap locks are not what it runs).
      if (!ready.has(conn.connection)) {
        await conn.query('SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED');
        ready.add(conn.connection);
      }
      return {
        async query(sql, params) {
          await conn.query(sql, params);
        },
        release: () => conn.release(),
      };
    },
    end: () => pool.end(),
  };
}

const hex64 = () => randomBytes(32).toString('hex');

/** Byte sizes of the stored JSON documents, close to a real DB-shape creation's. */
const PLAN_BYTES = 2600;
const ACTOR_BYTES = 330;
const REQUEST_BYTES = 450;
const EVIDENCE_BYTES = 600;
const PAYLOAD_BYTES = 420;

function filler(bytes: number): string {
  return JSON.stringify({ filler: 'x'.repeat(Math.max(0, bytes - 14)) });
}

/** The ten transactions of one creation, in order. */
function creationTransactions(dialect: Dialect, w: BenchWorld): Statement[][] {
  const now = nowSql(dialect);
  const share = forShareSql(dialect);
  const op = randomUUID();
  const task = randomUUID();
  const env = randomUUID();
  const session = randomUUID();
  const event = randomUUID();
  const steps = { wa: randomUUID(), sp: randomUUID(), li: randomUUID() };
  const owner = `bench-ceiling:${randomUUID().slice(0, 8)}`;
  const keyLock: Statement[] =
    dialect === 'postgres'
      ? [['SELECT pg_advisory_xact_lock(CAST(? AS bigint))', [randomBytes(8).readBigInt64BE(0).toString()]]]
      : (() => {
          const key = hex64();
          return [
            ['SELECT key_hash FROM lock_keys WHERE key_hash = ? FOR UPDATE', [key]],
            [`INSERT INTO lock_keys (key_hash, created_at) VALUES (?, ${now})`, [key]],
          ];
        })();
  const prefix: Statement[] = [
    [`SELECT state FROM workspaces WHERE id = ? ${share}`, [w.workspaceId]],
    ['SELECT id, state, plan_json, actor_json FROM task_creation_operations WHERE id = ? FOR UPDATE', [op]],
    ['SELECT id, creation_state, lifecycle_state FROM tasks WHERE id = ? FOR UPDATE', [task]],
    ['SELECT state FROM task_identities WHERE task_id = ? FOR UPDATE', [task]],
    [
      `SELECT id, kind, state, generation, request_json, evidence_json FROM task_creation_steps ${forceIndexSql(dialect, 'uq_task_creation_steps_key')} WHERE operation_id = ? ORDER BY id FOR UPDATE`,
      [op],
    ],
  ];
  const claim = (stepId: string): Statement[] => [
    ...prefix,
    [
      `UPDATE task_creation_steps SET state = 'running', generation = generation + 1, attempt = attempt + 1, lease_owner = ?, lease_expires_at = ${now}, updated_at = ${now} WHERE id = ? AND generation = 0`,
      [owner, stepId],
    ],
  ];
  const succeed = (stepId: string, to: 'succeeded' | 'armed'): Statement => [
    `UPDATE task_creation_steps SET state = ?, lease_owner = NULL, lease_expires_at = NULL, evidence_json = ?, evidence_sha256 = ?, updated_at = ${now} WHERE id = ? AND state = 'running' AND generation = 1 AND lease_owner = ?`,
    [to, filler(EVIDENCE_BYTES), hex64(), stepId, owner],
  ];
  const effectReads: Statement[] = [
    [`SELECT group_id FROM workspace_group_members WHERE group_id = ? AND task_id = ? ${share}`, [w.groupId, task]],
    [`SELECT id, state FROM task_sessions WHERE id = ? ${share}`, [session]],
    [`SELECT resource_key FROM task_resource_markers WHERE resource_key = ? ${share}`, [`session:${session}`]],
    [`SELECT id FROM task_environments WHERE id = ? ${share}`, [env]],
  ];
  const stepRow = (id: string, kind: string): Param[] => [
    id,
    op,
    task,
    w.workspaceId,
    kind,
    kind === 'workspace_attachment' ? hex64() : session,
    filler(REQUEST_BYTES),
    hex64(),
    hex64(),
    'planned',
  ];
  return [
    [
      [`SELECT state FROM workspaces WHERE id = ? ${share}`, [w.workspaceId]],
      [`SELECT id, revision, revoked_at FROM api_tokens WHERE id = ? ${share}`, [w.tokenId]],
      [`SELECT id FROM workflow_steps WHERE id = ? ${share}`, [w.workflowStepId]],
      [
        `INSERT INTO task_creation_operations (id, workspace_id, task_id, state, plan_json, manifest_hash, actor_json, actor_binding_hash, completion_token_sha256, start_policy, created_at, updated_at)
         VALUES (?, ?, ?, 'preparing', ?, ?, ?, ?, ?, 'immediate', ${now}, ${now})`,
        [op, w.workspaceId, task, filler(PLAN_BYTES), hex64(), filler(ACTOR_BYTES), hex64(), hex64()],
      ],
      ...keyLock,
      ['SELECT state FROM task_identities WHERE task_id = ? FOR UPDATE', [task]],
      [
        `INSERT INTO tasks (id, workspace_id, workflow_id, workflow_step_id, parent_id, title, description, creation_state, lifecycle_state, lifecycle_generation, start_policy, wip_admitted, external_id, creation_operation_id, revision, created_at, updated_at)
         VALUES (?, ?, NULL, ?, NULL, ?, NULL, 'preparing', 'live', 1, 'immediate', ?, NULL, ?, 0, ${now}, ${now})`,
        [task, w.workspaceId, w.workflowStepId, 'bench ceiling task', false, op],
      ],
      [
        `INSERT INTO task_identities (task_id, workspace_id, operation_id, state, created_at, updated_at) VALUES (?, ?, ?, 'preparing', ${now}, ${now})`,
        [task, w.workspaceId, op],
      ],
      [
        `INSERT INTO task_environments (id, workspace_id, task_id, kind, operation_id, created_at) VALUES (?, ?, ?, 'task', ?, ${now})`,
        [env, w.workspaceId, task, op],
      ],
      [
        `INSERT INTO task_creation_steps (id, operation_id, task_id, workspace_id, kind, step_key, request_json, request_sha256, idempotency_key, state, created_at, updated_at)
         VALUES ${[0, 1, 2].map(() => `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ${now}, ${now})`).join(', ')}`,
        [
          ...stepRow(steps.wa, 'workspace_attachment'),
          ...stepRow(steps.sp, 'session_prepare'),
          ...stepRow(steps.li, 'launch_intent'),
        ],
      ],
    ],
    claim(steps.wa),
    [
      ...prefix,
      [`SELECT id FROM workspace_groups WHERE id = ? ${share}`, [w.groupId]],
      [`SELECT group_id FROM workspace_group_members WHERE group_id = ? AND task_id = ? FOR UPDATE`, [w.groupId, task]],
      [
        `INSERT INTO workspace_group_members (group_id, task_id, workspace_id, role, operation_id, step_id, created_at) VALUES (?, ?, ?, 'member', ?, ?, ${now})`,
        [w.groupId, task, w.workspaceId, op, steps.wa],
      ],
      succeed(steps.wa, 'succeeded'),
    ],
    claim(steps.sp),
    [
      ...prefix,
      [`SELECT id FROM task_sessions WHERE id = ? FOR UPDATE`, [session]],
      [`SELECT id FROM task_environments WHERE id = ? ${share}`, [env]],
      [
        `INSERT INTO task_sessions (id, task_id, workspace_id, environment_id, executor_id, executor_profile_id, agent_profile_id, launch_config_sha256, state, operation_id, step_id, created_at, updated_at)
         VALUES (?, ?, ?, ?, 'local', ?, ?, ?, 'prepared', ?, ?, ${now}, ${now})`,
        [session, task, w.workspaceId, env, `local:${w.agentProfileId}`, w.agentProfileId, hex64(), op, steps.sp],
      ],
      [
        `INSERT INTO task_resource_markers (resource_key, workspace_id, task_id, operation_id, step_id, kind, marker_sha256, created_at) VALUES (?, ?, ?, ?, ?, 'session', ?, ${now})`,
        [`session:${session}`, w.workspaceId, task, op, steps.sp, hex64()],
      ],
      succeed(steps.sp, 'succeeded'),
    ],
    claim(steps.li),
    [
      ...prefix,
      [
        `SELECT id FROM task_launch_dispatch_claims WHERE creation_operation_id = ? AND task_id = ? AND session_id = ? ${share}`,
        [op, task, session],
      ],
      [`SELECT id, state FROM task_sessions WHERE id = ? ${share}`, [session]],
      succeed(steps.li, 'armed'),
    ],
    [
      ...prefix,
      ...effectReads,
      [
        `UPDATE task_creation_operations SET state = 'completing', completing_at = ${now}, updated_at = ${now} WHERE id = ?`,
        [op],
      ],
      [`UPDATE tasks SET creation_state = 'completing', updated_at = ${now} WHERE id = ?`, [task]],
    ],
    [
      ...prefix,
      ...effectReads,
      [`UPDATE tasks SET creation_state = 'completed', revision = 1, updated_at = ${now} WHERE id = ?`, [task]],
      [`UPDATE task_identities SET state = 'completed', updated_at = ${now} WHERE task_id = ?`, [task]],
      [
        `INSERT INTO task_revisions (task_id, revision, workspace_id, kind, operation_id, event_id, created_at) VALUES (?, 1, ?, 'created', ?, ?, ${now})`,
        [task, w.workspaceId, op, event],
      ],
      [
        `INSERT INTO event_outbox (event_id, workspace_id, task_id, revision, type, operation_id, payload_json, payload_sha256, created_at)
         VALUES (?, ?, ?, 1, 'task.created', ?, ?, ?, ${now})`,
        [event, w.workspaceId, task, op, filler(PAYLOAD_BYTES), hex64()],
      ],
      [
        `UPDATE task_creation_operations SET state = 'completed', result_outcome = 'Created', result_revision = 1, result_event_id = ?, completed_at = ${now}, updated_at = ${now} WHERE id = ? AND state = 'completing'`,
        [event, op],
      ],
    ],
    [
      [
        `UPDATE event_outbox SET delivered_at = ${now}, delivery_attempts = delivery_attempts + 1 WHERE event_id = ? AND delivered_at IS NULL`,
        [event],
      ],
    ],
  ];
}

export interface CeilingResult {
  creations: number;
  concurrency: number;
  wallMs: number;
  creationsPerSecond: number;
  transactionsPerSecond: number;
  statementsPerCreation: number;
  /** Latency of one whole creation (its ten transactions back to back). */
  latency: LatencySummary;
  /** Transactions run again after a deadlock or serialization failure. */
  retries: number;
  /** CPU ms per creation: the driver loop is `bench`, the server is `database`. */
  cpu: CpuBreakdown | null;
}

/**
 * After measuring, the ceiling's tasks are marked deleted. Its rows are real ledger rows in shape but synthetic in
 * content (filler plans, no real session): left live, each completed creation with an armed launch intent and no
 * dispatch claim looks like a stranded launch, and the fleet's reaper, measured next on the same database, would
 * re-send hundreds of launch wake-ups per sweep that fail on the filler plan (it did, until this).
 */
async function retire(pool: RawPool, world: BenchWorld): Promise<void> {
  const conn = await pool.acquire();
  try {
    await conn.query("UPDATE tasks SET lifecycle_state = 'deleted' WHERE workspace_id = ?", [world.workspaceId]);
  } finally {
    conn.release();
  }
}

export async function measureCeiling(
  dialect: Dialect,
  url: string,
  world: BenchWorld,
  total: number,
  concurrency: number,
  onProgress?: (done: number, elapsedMs: number) => void,
): Promise<CeilingResult> {
  const pool = dialect === 'postgres' ? pgPool(url, concurrency) : mysqlPool(url, concurrency);
  let retries = 0;
  const runOne = async (): Promise<number> => {
    const t0 = performance.now();
    for (const tx of creationTransactions(dialect, world)) {
      // Like the Store: a deadlock or serialization failure rolls back and runs the transaction again.
      for (let attempt = 1; ; attempt++) {
        const conn = await pool.acquire();
        try {
          await conn.query('BEGIN', []);
          for (const [sql, params] of tx) await conn.query(sql, params);
          await conn.query('COMMIT', []);
          break;
        } catch (err) {
          await conn.query('ROLLBACK', []).catch(() => undefined);
          if (!isRetryableError(err) || attempt >= MAX_ATTEMPTS) throw err;
          retries++;
        } finally {
          conn.release();
        }
        await new Promise((r) => setTimeout(r, Math.random() * 5 * attempt));
      }
    }
    return performance.now() - t0;
  };
  try {
    // Warm the pool and the plans, unmeasured.
    await Promise.all(Array.from({ length: concurrency }, runOne));
    const statements = creationTransactions(dialect, world).reduce((n, tx) => n + tx.length + 2, 0);
    const latencies: number[] = [];
    let next = 0;
    const cpuTracker = trackCpu([], { dialect });
    const started = performance.now();
    retries = 0;
    const lane = async () => {
      while (next < total) {
        next++;
        latencies.push(await runOne());
        onProgress?.(latencies.length, performance.now() - started);
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, total) }, lane));
    const wallMs = performance.now() - started;
    const cpu = cpuPerCreation(cpuTracker.before, cpuTracker.finish(), { api: [], workers: [] }, total);
    await retire(pool, world);
    return {
      creations: total,
      concurrency,
      wallMs,
      creationsPerSecond: total / (wallMs / 1000),
      transactionsPerSecond: (total * CEILING_TRANSACTIONS) / (wallMs / 1000),
      statementsPerCreation: statements,
      latency: summarize(latencies),
      retries,
      cpu,
    };
  } finally {
    await pool.end();
  }
}
