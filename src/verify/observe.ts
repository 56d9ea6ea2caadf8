/**
 * Re-observation for `taskledger verify`: for an unfinished creation
 * (`preparing`, `preparing-release` or `completing`), every step the ledger
 * records as done (`succeeded`, or an `armed` launch intent) and not
 * compensated must still be exactly present in the world, by the same
 * read-only `observe` recovery uses. A step that moved on meanwhile (a fleet
 * is running) is re-read and skipped, not reported.
 *
 * Only the verdict counts (`present_exact`), not the observation's bytes.
 * They may change legitimately: a pull request's state and URL, or the
 * generation a resolved step was recorded under. An observation that could
 * not be made (the provider unreachable, an I/O error) is reported as
 * unobserved, not as drift.
 *
 * Ended creations are not re-observed: once `task.created` is out, the task's
 * session, worktree and pull request belong to the agent and its users, and
 * change by design. verify/checks.ts checks their ledger proofs.
 *
 * Runs outside any transaction (Git and provider calls are I/O).
 */
import { readRows } from '../db/tx';
import type { StepHandlers } from '../kinds/registry';
import type { EffectDeps } from '../kinds/contract';
import type { Drift } from './drift';
import type { OperationRecord, VerifyStepRow } from './ledger-page';

const UNFINISHED = new Set(['preparing', 'preparing-release', 'completing']);
const DONE = new Set(['succeeded', 'armed']);

/** A step whose effect the ledger says exists now: done, and no compensation started. */
const expectedPresent = (s: VerifyStepRow) => DONE.has(s.state) && s.compensation_state === 'none';

/** Whether observing this operation's steps is meaningful (see above). */
export function observable(rec: OperationRecord): boolean {
  return UNFINISHED.has(rec.op.state) && rec.steps.some(expectedPresent);
}

/** The operation and the step are still as this page read them (state, generation, compensation). */
async function stillAsRead(deps: EffectDeps, rec: OperationRecord, step: VerifyStepRow): Promise<boolean> {
  const [row] = await readRows<{ op_state: string; state: string; generation: number; compensation_state: string }>(
    deps.db,
    `SELECT o.state AS op_state, s.state, s.generation, s.compensation_state FROM task_creation_operations o
       JOIN task_creation_steps s ON s.operation_id = o.id WHERE o.id = ? AND s.id = ?`,
    [rec.op.id, step.id],
  );
  return (
    row !== undefined &&
    row.op_state === rec.op.state &&
    row.state === step.state &&
    Number(row.generation) === step.generation &&
    row.compensation_state === step.compensation_state
  );
}

export interface ObservedOperation {
  drift: Drift[];
  /** Steps whose effect could not be observed (provider unreachable, I/O error): neither proven nor disproven. */
  unobserved: Drift[];
  observed: number;
}

/** Observes every step of one unfinished creation whose effect should exist. */
export async function observeOperation(
  deps: EffectDeps,
  handlers: StepHandlers,
  rec: OperationRecord,
): Promise<ObservedOperation> {
  const out: ObservedOperation = { drift: [], unobserved: [], observed: 0 };
  if (!observable(rec)) return out;
  for (const step of rec.steps) {
    if (!expectedPresent(step)) continue;
    out.observed++;
    let finding: { message: string; proven: boolean } | null = null;
    try {
      const seen = await handlers[step.kind].observe(deps, step);
      if (seen.effect !== 'present_exact') {
        const why = (seen.evidence.observation as { reason?: unknown }).reason;
        const reason = typeof why === 'string' ? why : '';
        finding = {
          message: `recorded ${step.state}, observed ${seen.effect}${reason ? `: ${reason}` : ''}`,
          // An effect that could not be read (a provider down, credentials refused) is not proven either way.
          proven: seen.effect !== 'unobservable',
        };
      }
    } catch (err) {
      finding = { message: `could not observe: ${err instanceof Error ? err.message : String(err)}`, proven: false };
    }
    if (finding === null || !(await stillAsRead(deps, rec, step))) continue;
    const entry: Drift = {
      code: 'effect',
      operation_id: rec.op.id,
      task_id: rec.op.task_id,
      subject: `step ${step.kind}/${step.step_key}`,
      message: finding.message,
    };
    (finding.proven ? out.drift : out.unobserved).push(entry);
  }
  return out;
}
