/**
 * Process configuration from the environment (names and defaults: the public
 * contract in docs and shared/design/API.md).
 */
import { resolve } from 'node:path';
import { dbConfigFromEnv, type DbConfig } from '../db/config';

/** Why 7 days: long enough for a draft to be finished and submitted, short enough that abandoned uploads do not pile up. */
export const DEFAULT_STAGED_TTL_MS = 7 * 24 * 60 * 60 * 1000;

export interface AppConfig {
  db: DbConfig;
  redisUrl: string;
  port: number;
  adminToken: string | null;
  dataDir: string;
  queuePrefix: string;
  /** Step and compensation lease. Why 30 s: see DEFAULT_LEASE_MS. */
  leaseMs: number;
  /** Reaper sweep period. Why 5 s: a lost wake-up is healed within seconds while the sweep stays a few cheap indexed queries. */
  sweepMs: number;
  /** Git and provider call timeout. Why 15 s: local Git is milliseconds, provider APIs answer in under a second; 15 s fails a hung call well inside the lease. */
  effectTimeoutMs: number;
  /**
   * A creation (or an unknown launch) that has not moved for this long is reported as stuck: the
   * `taskledger_stuck_operations` gauge and `taskledger ops list --stuck`. Why 10 minutes: far beyond any healthy
   * creation (seconds) and any retry back-off (5 minutes at most), short enough to page someone the same hour.
   */
  stuckAfterMs: number;
  /** How long a staged upload waits for a creation to claim it before the reaper deletes it. Default DEFAULT_STAGED_TTL_MS. */
  stagedTtlMs: number;
  /**
   * `TASKLEDGER_METRICS_PORT`: where a process without the `api` role serves `GET /metrics` (127.0.0.1), so that
   * every process of a fleet split by role can be scraped; unset, such a process serves nothing.
   */
  metricsPort?: number;
}

function int(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${name} must be a positive integer (got "${raw}")`);
  return n;
}

export function configFromEnv(env: NodeJS.ProcessEnv = process.env): AppConfig {
  return {
    db: dbConfigFromEnv(env),
    redisUrl: env.TASKLEDGER_REDIS_URL?.trim() || 'redis://127.0.0.1:6379',
    port: int(env, 'TASKLEDGER_PORT', 8080),
    adminToken: env.TASKLEDGER_ADMIN_TOKEN?.trim() || null,
    dataDir: resolve(env.TASKLEDGER_DATA_DIR?.trim() || './.taskledger'),
    queuePrefix: env.TASKLEDGER_QUEUE_PREFIX?.trim() || 'taskledger',
    leaseMs: int(env, 'TASKLEDGER_LEASE_MS', 30_000),
    sweepMs: int(env, 'TASKLEDGER_SWEEP_MS', 5_000),
    effectTimeoutMs: int(env, 'TASKLEDGER_EFFECT_TIMEOUT_MS', 15_000),
    stuckAfterMs: int(env, 'TASKLEDGER_STUCK_AFTER_MS', 600_000),
    stagedTtlMs: int(env, 'TASKLEDGER_STAGED_TTL_MS', DEFAULT_STAGED_TTL_MS),
    ...(env.TASKLEDGER_METRICS_PORT?.trim() ? { metricsPort: int(env, 'TASKLEDGER_METRICS_PORT', 0) } : {}),
  };
}

/**
 * The timeout each effect's I/O (one Git command, one provider call) runs
 * under in a worker: the configured one, but never more than half the lease.
 * A handler renews its lease right before each effect, so an effect started
 * under a live lease has finished or been killed before that lease can
 * expire and the reaper observe the step (docs/adr/0010-connection-loss.md):
 * an observation of "absent" can never be overtaken by a late effect.
 */
export function effectTimeoutWithinLease(config: Pick<AppConfig, 'effectTimeoutMs' | 'leaseMs'>): number {
  return Math.max(1, Math.min(config.effectTimeoutMs, Math.floor(config.leaseMs / 2)));
}
