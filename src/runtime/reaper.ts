/**
 * The reaper's sweep, one pass (`sweepOnce`, also what tests call instead of
 * sleeping): expired leases become `unknown`; each `unknown` step is observed
 * (I/O outside any transaction) and resolved only from that proof — effect
 * present exactly → `succeeded` (`armed` for a launch intent), proven absent
 * → `retry_wait`, anything else stays `unknown` for an operator; then every
 * non-terminal operation gets its due wake-ups again, so flushing Redis loses
 * nothing.
 */
import type { QueueSet } from '../coordinator/queues';
import { readRows, type Db } from '../db/tx';
import { isTaskLedgerError } from '../domain/errors';
import type { Logger } from '../log';
import type { StepHandlers } from '../steps/index';
import type { EffectDeps, StepHandler } from '../steps/types';
import { expireTaskCreationLeases, findExpiredLeaseOperations } from '../store/lease-expiry';
import { resolveTaskCreationStep } from '../store/step-results';
import { STEP_COLUMNS } from '../store/step-rows';
import type { StepRow } from '../store/types';
import { sweepWakeups } from './sweep';

export interface ReaperDeps {
  effects: EffectDeps;
  handlers: StepHandlers;
  queues: QueueSet | null;
  log: Logger;
  actor: string;
  /** Limit the sweep to one workspace (a per-tenant reaper; tests sharing a database). Default: all. */
  workspaceId?: string;
}

export interface SweepReport {
  expiredSteps: number;
  expiredCompensations: number;
  reconciled: { succeeded: number; retry: number; stillUnknown: number };
  wakeups: number;
}

/** Why 200: a sweep's work stays bounded; the next sweep continues. */
const BATCH = 200;

async function reconcileUnknown(deps: ReaperDeps, report: SweepReport): Promise<void> {
  const db: Db = deps.effects.db;
  const rows = await readRows<StepRow>(
    db,
    `SELECT ${STEP_COLUMNS} FROM task_creation_steps s
      WHERE s.state = 'unknown'
        AND EXISTS (SELECT 1 FROM task_creation_operations o WHERE o.id = s.operation_id AND o.state = 'preparing')
        ${deps.workspaceId === undefined ? '' : 'AND s.workspace_id = ?'}
      LIMIT ${BATCH}`,
    deps.workspaceId === undefined ? [] : [deps.workspaceId],
  );
  for (const raw of rows) {
    const step: StepRow = { ...raw, generation: Number(raw.generation), attempt: Number(raw.attempt) };
    const log = deps.log.child({ operation_id: step.operation_id, step_id: step.id, kind: step.kind });
    const handler = deps.handlers[step.kind] as StepHandler;
    let observation;
    try {
      observation = await handler.observe(deps.effects, step);
    } catch (err) {
      log.warn({ err }, 'could not observe an unknown step; it stays unknown');
      report.reconciled.stillUnknown++;
      continue;
    }
    if (observation.effect === 'conflict') {
      log.warn(
        { evidence: observation.evidence.observation },
        'unknown step: mixed, foreign or changed effect; left for an operator',
      );
      report.reconciled.stillUnknown++;
      continue;
    }
    try {
      const to = await resolveTaskCreationStep(
        db,
        { kind: 'operation', operationId: step.operation_id, actor: deps.actor },
        { kind: step.kind, stepKey: step.step_key },
        {
          resolution: observation.effect === 'present_exact' ? 'succeeded' : 'retry_wait',
          evidence: observation.evidence,
        },
      );
      if (to === 'retry_wait') report.reconciled.retry++;
      else report.reconciled.succeeded++;
      log.info({ resolved: to }, 'unknown step reconciled from observation');
    } catch (err) {
      if (isTaskLedgerError(err)) {
        log.warn({ code: err.code, detail: err.message }, 'unknown step not resolved');
        report.reconciled.stillUnknown++;
        continue;
      }
      throw err;
    }
  }
}

export async function sweepOnce(deps: ReaperDeps): Promise<SweepReport> {
  const report: SweepReport = {
    expiredSteps: 0,
    expiredCompensations: 0,
    reconciled: { succeeded: 0, retry: 0, stillUnknown: 0 },
    wakeups: 0,
  };
  for (const opId of await findExpiredLeaseOperations(deps.effects.db, BATCH, deps.workspaceId)) {
    const r = await expireTaskCreationLeases(deps.effects.db, opId, deps.actor);
    report.expiredSteps += r.steps;
    report.expiredCompensations += r.compensations;
  }
  await reconcileUnknown(deps, report);
  if (deps.queues) {
    const w = await sweepWakeups(deps.effects.db, deps.queues, deps.workspaceId);
    report.wakeups = w.operations + w.outboxWorkspaces;
  }
  return report;
}
