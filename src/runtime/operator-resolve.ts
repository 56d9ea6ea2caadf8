/**
 * An operator's resolution of an `unknown` step, checked against the world
 * (`POST /creation-operations/:id/steps/:step_key/resolve`). The operator
 * says what happened; the system looks again before it believes it, so a
 * mistaken "absent" can never make a step run twice (a second worktree, a
 * second provider comment) and a mistaken "present" never completes a
 * creation over a missing effect.
 *
 * 1. The step is read (plain read): it must exist and be `unknown`.
 * 2. Its kind's `observe` runs now, outside any transaction (read-only I/O).
 * 3. The fresh observation must agree with the resolution: `succeeded` needs
 *    `present_exact`; `retry_wait` and `failed` need `absent_proven`.
 *    Otherwise `observation_disagrees` (409) with what was observed and why;
 *    nothing is written.
 * 4. ResolveTaskCreationStep records the decision with the observation's own
 *    evidence, at the observed generation (a step that moved on meanwhile is
 *    `stale_claim`, zero writes), under the operator's actor.
 *
 * An operator-supplied evidence document is not needed and not trusted: the
 * system's own observation is the evidence recorded.
 */
import { readRows } from '../db/tx';
import { ConflictError, TaskLedgerError } from '../domain/errors';
import type { StepKind } from '../domain/vocab';
import type { StepHandlers } from '../kinds/registry';
import type { EffectDeps, StepHandler } from '../kinds/contract';
import { resolveTaskCreationStep } from '../store/step-results';
import { normalizeStep, STEP_COLUMNS } from '../store/step-rows';
import type { StepRow } from '../store/types';

export type OperatorResolution = 'succeeded' | 'retry_wait' | 'failed';

export interface OperatorResolveDeps {
  effects: EffectDeps;
  handlers: StepHandlers;
}

const NEEDS: Record<OperatorResolution, 'present_exact' | 'absent_proven'> = {
  succeeded: 'present_exact',
  retry_wait: 'absent_proven',
  failed: 'absent_proven',
};

export interface OperatorResolved {
  state: string;
  /** What the fresh observation found (it agreed with the resolution). */
  observed: string;
}

export async function resolveStepByOperator(
  deps: OperatorResolveDeps,
  target: { operationId: string; kind: StepKind; stepKey: string; actor: string },
  resolution: OperatorResolution,
): Promise<OperatorResolved> {
  const [raw] = await readRows<StepRow>(
    deps.effects.db,
    `SELECT ${STEP_COLUMNS} FROM task_creation_steps WHERE operation_id = ? AND kind = ? AND step_key = ?`,
    [target.operationId, target.kind, target.stepKey],
  );
  if (!raw) {
    throw new TaskLedgerError('not_found', 'no such step in this creation operation', {
      operation_id: target.operationId,
      kind: target.kind,
      step_key: target.stepKey,
    });
  }
  const step = normalizeStep(raw);
  if (step.state !== 'unknown') {
    throw new ConflictError('creation_state_conflict', `the step is ${step.state}; only an unknown step is resolved`, {
      operation_id: target.operationId,
      state: step.state,
    });
  }
  const handler = deps.handlers[step.kind] as StepHandler;
  let observed: {
    effect: string;
    reason: string;
    evidence?: Parameters<typeof resolveTaskCreationStep>[3]['evidence'];
  };
  try {
    const o = await handler.observe(deps.effects, step);
    const why = (o.evidence.observation as { reason?: unknown }).reason;
    observed = { effect: o.effect, reason: typeof why === 'string' ? why : o.effect, evidence: o.evidence };
  } catch (err) {
    observed = { effect: 'unobservable', reason: `observe failed: ${(err as Error).message ?? String(err)}` };
  }
  const needed = NEEDS[resolution];
  if (observed.effect !== needed || !observed.evidence) {
    throw new ConflictError(
      'observation_disagrees',
      `resolving ${resolution} needs the effect observed ${needed}; it is observed ${observed.effect}: ${observed.reason}`,
      { operation_id: target.operationId, resolution, needed, observed: observed.effect, reason: observed.reason },
    );
  }
  const state = await resolveTaskCreationStep(
    deps.effects.db,
    { kind: 'operation', operationId: target.operationId, actor: target.actor },
    { kind: step.kind, stepKey: step.step_key },
    { resolution, evidence: observed.evidence, observedGeneration: step.generation },
  );
  return { state, observed: observed.effect };
}
