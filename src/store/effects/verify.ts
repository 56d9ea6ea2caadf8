/**
 * Complete's byte-equivalence of effect rows, driving each kind's `verifier`
 * (src/kinds/<kind>/index.ts, listed in src/kinds/registry.ts). Never begins
 * a transaction.
 *
 * Contract:
 * - A succeeded or armed step whose kind has no module fails closed with
 *   `evidence_mismatch`.
 * - A verifier re-derives the step's effect rows from its stored request and
 *   owner, re-reads them and throws `ConflictError('evidence_mismatch')` if
 *   any row or any hash in the evidence differs. Its optional `locks` names
 *   the rows (tiers > 7) it reads, so that
 * - `verifyAllEffectRowsLocked(tx, steps, extra)` can take every step's
 *   locks (plus `extra`) in one ascending global order first, then run the
 *   verifiers, whose own lock requests are then no-ops (already held).
 * - `verifyEffectRowsLocked(tx, step, evidence)` verifies one step alone.
 * Runs after the Complete predicate, under Complete's locks (1..7).
 */
import type { StepEvidence } from '../../canonical/types';
import type { Tx } from '../../db/tx';
import type { StepRow } from '../types';
import { effectMismatch } from './recording';
import { storedEvidenceOf } from '../evidence-memo';
import { takeLocks, type LockNeed } from './row-locks';
import { STEP_KIND_MODULES } from '../../kinds/registry';
import type { EffectVerifier } from '../../kinds/contract';

export type { LockNeed } from './row-locks';

export type { EffectVerifier } from '../../kinds/contract';

function verifierOf(step: StepRow): EffectVerifier {
  const module = (STEP_KIND_MODULES as Partial<Record<string, { verifier: EffectVerifier }>>)[step.kind];
  if (!module) throw effectMismatch(step, `no effect verifier is registered for ${step.kind}`);
  return module.verifier;
}

function storedEvidence(step: StepRow): StepEvidence {
  if (step.evidence_json === null) throw effectMismatch(step, 'no evidence is stored');
  try {
    return storedEvidenceOf({ ...step, evidence_json: step.evidence_json }).evidence;
  } catch (err) {
    throw effectMismatch(step, `stored evidence is invalid (${(err as Error).message})`);
  }
}

export async function verifyEffectRowsLocked(tx: Tx, step: StepRow, evidence: StepEvidence): Promise<void> {
  const v = verifierOf(step);
  if (evidence.effect !== 'present_exact') throw effectMismatch(step, `evidence is ${evidence.effect}`);
  if (v.locks) await takeLocks(tx, v.locks(step, evidence));
  await v.verify(tx, step, evidence);
}

/**
 * The locks `verifyAllEffectRowsLocked` would take for these steps (their
 * succeeded/armed ones), for a transaction that must take them earlier, in
 * one order with its own. A step whose evidence is unreadable names none:
 * the verification itself reports it.
 */
export function effectRowLockNeeds(steps: readonly StepRow[]): LockNeed[] {
  return steps
    .filter((s) => s.state === 'succeeded' || s.state === 'armed')
    .flatMap((step) => {
      try {
        const verifier = verifierOf(step);
        return verifier.locks ? verifier.locks(step, storedEvidence(step)) : [];
      } catch {
        return [];
      }
    });
}

/** Every succeeded/armed step's effect rows, locks first in one global order. */
export async function verifyAllEffectRowsLocked(
  tx: Tx,
  steps: readonly StepRow[],
  extraLocks: readonly LockNeed[] = [],
): Promise<void> {
  const work = steps
    .filter((s) => s.state === 'succeeded' || s.state === 'armed')
    .map((step) => ({ step, evidence: storedEvidence(step), verifier: verifierOf(step) }));
  const needs: LockNeed[] = [...extraLocks];
  for (const w of work) {
    if (w.evidence.effect !== 'present_exact') throw effectMismatch(w.step, `evidence is ${w.evidence.effect}`);
    if (w.verifier.locks) needs.push(...w.verifier.locks(w.step, w.evidence));
  }
  // The locks first (in global order), then every verifier's reads of rows those locks hold: issued together,
  // they share round trips (Tx.batch keeps issue order; the verifiers' own lock requests are already held).
  await Promise.all([takeLocks(tx, needs), ...work.map((w) => w.verifier.verify(tx, w.step, w.evidence))]);
}
