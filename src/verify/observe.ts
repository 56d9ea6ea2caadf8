/**
 * Re-observation for `taskledger verify`: for an unfinished creation
 * (`preparing` or `completing`), every step the ledger records as done
 * (`succeeded`, or an `armed` launch intent) must still be exactly present in
 * the world, through the same read-only `observe` recovery uses. A step that
 * moved on in the meantime (a fleet is running) is re-read and skipped, not
 * reported.
 *
 * Ended creations are not re-observed: once `task.created` is out, the task's
 * session, worktree and pull request belong to the agent and its users, and
 * change by design; their ledger proofs are checked by verify/checks.ts.
 *
 * Runs outside any transaction (Git and provider calls are I/O).
 */
import { canonicalJson, parseCanonical } from '../canonical/canonical-json';
import { readRows } from '../db/tx';
import type { StepHandlers } from '../steps';
import type { EffectDeps } from '../steps/types';
import type { Drift } from './drift';
import type { OperationRecord } from './ledger-page';

const UNFINISHED = new Set(['preparing', 'completing']);
const DONE = new Set(['succeeded', 'armed']);

/** Whether observing this operation's steps is meaningful (see above). */
export function observable(rec: OperationRecord): boolean {
  return UNFINISHED.has(rec.op.state) && rec.steps.some((s) => DONE.has(s.state));
}

async function stillAsRead(deps: EffectDeps, rec: OperationRecord, stepId: string, state: string): Promise<boolean> {
  const [row] = await readRows<{ op_state: string; step_state: string }>(
    deps.db,
    `SELECT o.state AS op_state, s.state AS step_state FROM task_creation_operations o
       JOIN task_creation_steps s ON s.operation_id = o.id WHERE o.id = ? AND s.id = ?`,
    [rec.op.id, stepId],
  );
  return row?.op_state === rec.op.state && row.step_state === state;
}

/** Observes every done step of one unfinished creation; returns the drift and how many steps it observed. */
export async function observeOperation(
  deps: EffectDeps,
  handlers: StepHandlers,
  rec: OperationRecord,
): Promise<{ drift: Drift[]; observed: number }> {
  const drift: Drift[] = [];
  let observed = 0;
  if (!observable(rec)) return { drift, observed };
  for (const step of rec.steps) {
    if (!DONE.has(step.state)) continue;
    observed++;
    const subject = `step ${step.kind}/${step.step_key}`;
    let message: string | null = null;
    try {
      const seen = await handlers[step.kind].observe(deps, step);
      if (seen.effect !== 'present_exact') {
        const why = (seen.evidence.observation as { reason?: unknown }).reason;
        message = `recorded ${step.state}, observed ${seen.effect}${typeof why === 'string' ? `: ${why}` : ''}`;
      } else if (step.evidence_json !== null) {
        const stored = parseCanonical(step.evidence_json) as { observation?: unknown };
        if (canonicalJson(stored.observation ?? null) !== canonicalJson(seen.evidence.observation)) {
          message = 'present, but not as the recorded evidence describes it';
        }
      }
    } catch (err) {
      message = `could not observe: ${err instanceof Error ? err.message : String(err)}`;
    }
    if (message !== null && (await stillAsRead(deps, rec, step.id, step.state))) {
      drift.push({ code: 'effect', operation_id: rec.op.id, task_id: rec.op.task_id, subject, message });
    }
  }
  return { drift, observed };
}
