/**
 * NoteUnresolvedStep: recovery observed an `unknown` step and could not
 * decide it — the world could not be read (`unobservable`: a provider down or
 * refusing our credentials, Git or the file system failing) or it shows a
 * proven contradiction (`conflict`: a foreign or changed effect). The step
 * stays `unknown` (nothing is proven); the note makes that visible and paces
 * the next look, so recovery never spins silently.
 *
 * One transaction, the claim path's locks: workspace 1, operation 4.2 (the
 * guard re-checks the recovery claim when one is given), task 5.2, identity
 * 6, steps 7. Requires the step `unknown` at the observed generation (else
 * `stale_claim`, zero writes). Writes `error_code` (`unobservable` |
 * `conflict`), `error_json` `{verdict, reason, observations,
 * first_observed_at, last_observed_at}` and `next_attempt_at` = now +
 * backoff (unobservable: 5 s doubling to 5 min; conflict: 5 min, it waits for
 * an operator). `updated_at` is left alone: a note is not progress (stuck
 * operations are found by it). No event.
 */
import { canonicalJson, parseCanonical } from '../canonical/canonical-json';
import { ConflictError } from '../domain/errors';
import { runTransaction, type Db } from '../db/tx';
import { guardOperationLocked, lockTaskChainLocked } from './operation-guard';
import { findStep, lockStepsLocked, type StepRef } from './step-rows';
import type { OperationAuthority } from './types';

export type UnresolvedVerdict = 'unobservable' | 'conflict';

export interface UnresolvedNote {
  verdict: UnresolvedVerdict;
  reason: string;
  observations: number;
  first_observed_at: string;
  last_observed_at: string;
}

/** Why: a provider blip heals in seconds and an outage is not hammered; a contradiction waits for a person. */
export function noteBackoffMs(verdict: UnresolvedVerdict, observations: number): number {
  if (verdict === 'conflict') return 300_000;
  return Math.min(300_000, 5000 * 2 ** Math.max(0, observations - 1));
}

/** The step's last note (its `error_json` when `error_code` is a verdict), or null. */
export function parseNote(errorCode: string | null, errorJson: string | null): UnresolvedNote | null {
  if ((errorCode !== 'unobservable' && errorCode !== 'conflict') || errorJson === null) return null;
  try {
    return parseCanonical(errorJson) as UnresolvedNote;
  } catch {
    return null;
  }
}

export async function noteUnresolvedStep(
  db: Db,
  auth: OperationAuthority,
  ref: StepRef & { generation: number },
  verdict: UnresolvedVerdict,
  reason: string,
): Promise<UnresolvedNote> {
  return runTransaction(db, 'NoteUnresolvedStep', async (tx) => {
    const { op } = await guardOperationLocked(tx, auth, { externalIdKey: false, steps: true });
    await lockTaskChainLocked(tx, op, { externalIdKey: false, steps: true });
    const step = findStep(await lockStepsLocked(tx, op.id), ref);
    if (step.state !== 'unknown' || step.generation !== ref.generation) {
      throw new ConflictError('stale_claim', 'the step moved on since it was observed', { step_id: step.id });
    }
    const [prior] = await tx.rows<{ error_code: string | null; error_json: string | null }>(
      'SELECT error_code, error_json FROM task_creation_steps WHERE id = ?',
      [step.id],
    );
    const previous = parseNote(prior?.error_code ?? null, prior?.error_json ?? null);
    const now = new Date().toISOString();
    const note: UnresolvedNote = {
      verdict,
      reason: reason.slice(0, 500),
      observations: (previous?.observations ?? 0) + 1,
      first_observed_at: previous?.first_observed_at ?? now,
      last_observed_at: now,
    };
    const changed = await tx.exec(
      `UPDATE task_creation_steps SET error_code = ?, error_json = ?, next_attempt_at = ${tx.nowPlusMs}
        WHERE id = ? AND state = 'unknown' AND generation = ?`,
      [verdict, canonicalJson(note), noteBackoffMs(verdict, note.observations), step.id, step.generation],
    );
    if (changed !== 1) throw new ConflictError('stale_claim', 'the step changed while noted', { step_id: step.id });
    return note;
  });
}
