/**
 * Prometheus metrics of one taskledger process. `createMetrics()` builds its
 * own Registry (never the prom-client global one, so several apps or tests in
 * one process never collide) with the default process metrics plus the
 * ledger's counters and histograms below. `GET /metrics` serves `registry`.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { connectionsLost } from './db/connection-loss';
import { contextCounts, type ContextSource } from './store/begin-context-cache';

/** Label values of `taskledger_creations_total{outcome}`. */
export const CREATION_METRIC_OUTCOMES = [
  'Created',
  'FoundSettled',
  'FoundUnsettled',
  'CreatedIdentityLost',
  'pending',
  'aborted',
  'error',
] as const;
export type CreationMetricOutcome = (typeof CREATION_METRIC_OUTCOMES)[number];

export interface Metrics {
  registry: Registry;
  /** `taskledger_creations_total{outcome}`: one per create request answered. */
  creations: Counter<'outcome'>;
  /** `taskledger_creation_seconds`: Begin to Complete (or to the wait deadline). */
  creationSeconds: Histogram;
  /** `taskledger_step_results_total{kind,state}`: step results recorded by workers. */
  stepResults: Counter<'kind' | 'state'>;
  /** `taskledger_jobs_skipped_total{queue,reason}`: stale or duplicate wake-ups a worker ignored. */
  jobsSkipped: Counter<'queue' | 'reason'>;
  /** `taskledger_outbox_delivered_total{type}`. */
  outboxDelivered: Counter<'type'>;
  /** `taskledger_launches_total{state}`. */
  launches: Counter<'state'>;
  /** `taskledger_http_request_seconds{route,method,status}`. */
  httpRequests: Histogram<'route' | 'method' | 'status'>;
  /**
   * `taskledger_reconciliations_total{kind,verdict}`: observations of `unknown` steps by recovery, by what they
   * proved (`present_exact`, `absent_proven`) or why they could not decide (`conflict`, `unobservable`).
   */
  reconciliations: Counter<'kind' | 'verdict'>;
  /**
   * `taskledger_stuck_operations{action}`: unfinished creations (and unknown launches) that have not moved for
   * TASKLEDGER_STUCK_AFTER_MS, by the one legal action they wait for; set by each reaper sweep.
   */
  stuckOperations: Gauge<'action'>;
  /**
   * `taskledger_phase_a_in_batch_total{result}`: ledger batches that armed a launch intent and tried Complete's
   * phase A in the same transaction (ADR 0016): `completing`, or why phase A was left to Complete
   * (`predicate_failed`, `not_completable`, `lock_order`).
   */
  phaseAInBatch: Counter<'result'>;
  /**
   * `taskledger_db_connections_lost_total`: database connections this process saw dropped (each one's command
   * restarted, or answered `commit_outcome_unknown` if COMMIT was on the wire); read at scrape time.
   */
  connectionsLost: Counter;
  /**
   * `taskledger_begin_context_total{source}`: plans Begin built from this process's memory of the context
   * (`memory`), from fresh reads (`fresh`), and attempts from memory that a fence found stale (`stale`, each
   * followed by a `fresh` one); ADR 0052. Read at scrape time.
   */
  beginContext: Counter<'source'>;
}

/** Why these buckets: a found external ID answers in milliseconds; a creation
 *  with Git worktrees and provider calls takes seconds; 30 s is twice the
 *  default wait, so a slow tail still lands in a finite bucket. */
const CREATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30];

/** Why: REST reads take milliseconds; creates wait up to `wait_ms` (15 s by default, 120 s at most). */
const HTTP_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15, 30, 60, 120];

export function createMetrics(): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const registers = [registry];
  return {
    registry,
    creations: new Counter({
      name: 'taskledger_creations_total',
      help: 'Create requests answered, by outcome',
      labelNames: ['outcome'],
      registers,
    }),
    creationSeconds: new Histogram({
      name: 'taskledger_creation_seconds',
      help: 'Time from Begin to a terminal creation outcome (or the wait deadline)',
      buckets: CREATION_BUCKETS,
      registers,
    }),
    stepResults: new Counter({
      name: 'taskledger_step_results_total',
      help: 'Creation step results recorded, by step kind and resulting state',
      labelNames: ['kind', 'state'],
      registers,
    }),
    jobsSkipped: new Counter({
      name: 'taskledger_jobs_skipped_total',
      help: 'Queue jobs a worker skipped (stale generation, duplicate, nothing due), by queue and reason',
      labelNames: ['queue', 'reason'],
      registers,
    }),
    outboxDelivered: new Counter({
      name: 'taskledger_outbox_delivered_total',
      help: 'Outbox events delivered, by event type',
      labelNames: ['type'],
      registers,
    }),
    launches: new Counter({
      name: 'taskledger_launches_total',
      help: 'Agent launch dispatch results, by resulting state',
      labelNames: ['state'],
      registers,
    }),
    reconciliations: new Counter({
      name: 'taskledger_reconciliations_total',
      help: 'Observations of unknown steps by recovery, by step kind and verdict',
      labelNames: ['kind', 'verdict'],
      registers,
    }),
    stuckOperations: new Gauge({
      name: 'taskledger_stuck_operations',
      help: 'Creations that have not moved for TASKLEDGER_STUCK_AFTER_MS, by the legal action they wait for',
      labelNames: ['action'],
      registers,
    }),
    phaseAInBatch: new Counter({
      name: 'taskledger_phase_a_in_batch_total',
      help: "Ledger batches that armed a launch intent and ran Complete's phase A with it, by result",
      labelNames: ['result'],
      registers,
    }),
    connectionsLost: lostConnectionsCounter(registers),
    beginContext: beginContextCounter(registers),
    httpRequests: new Histogram({
      name: 'taskledger_http_request_seconds',
      help: 'HTTP request duration, by route pattern, method and status code',
      labelNames: ['route', 'method', 'status'],
      buckets: HTTP_BUCKETS,
      registers,
    }),
  };
}

function lostConnectionsCounter(registers: Registry[]): Counter {
  let reported = 0;
  return new Counter({
    name: 'taskledger_db_connections_lost_total',
    help: 'Database connections this process saw dropped (its command restarted on a new connection)',
    registers,
    collect() {
      const now = connectionsLost();
      if (now > reported) this.inc(now - reported);
      reported = now;
    },
  });
}

function beginContextCounter(registers: Registry[]): Counter<'source'> {
  const reported: Record<ContextSource, number> = { memory: 0, fresh: 0, stale: 0 };
  return new Counter({
    name: 'taskledger_begin_context_total',
    help: 'Plans Begin built from remembered context, from fresh reads, and remembered attempts found stale (ADR 0052)',
    labelNames: ['source'],
    registers,
    collect() {
      const now = contextCounts();
      for (const source of ['memory', 'fresh', 'stale'] as const) {
        if (now[source] > reported[source]) this.inc({ source }, now[source] - reported[source]);
        reported[source] = now[source];
      }
    },
  });
}
