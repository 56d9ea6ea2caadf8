/**
 * Runs an operation's pending compensations (`required`, or `retry_wait`
 * that is due): claims each through ClaimTaskCreationCompensation, undoes the
 * operation-owned effect outside any transaction (kind-specific), and records
 * `compensated|transferred|unknown|retry_wait` through
 * CompleteTaskCreationCompensation. PLACEHOLDER: the per-kind implementations
 * land with issue 4; until then it reports nothing done.
 */
import type { EffectDeps } from '../steps/types';

export interface CompensationRunReport {
  compensated: number;
  transferred: number;
  retry: number;
  unknown: number;
}

export async function runPendingCompensations(
  _deps: EffectDeps,
  _operationId: string,
  _owner: string,
): Promise<CompensationRunReport> {
  return { compensated: 0, transferred: 0, retry: 0, unknown: 0 };
}
