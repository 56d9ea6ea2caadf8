/**
 * Shared recording for every kind's undo: `settleRows` runs the Store's
 * settling transaction over a step's operation-owned rows (undo them all
 * when every one is still exactly ours or already undone and nothing blocks;
 * otherwise write nothing and transfer the complete proof to a cleanup job);
 * `recordPlain` records an outcome without rows (`retry_wait`, `unknown`,
 * or a transfer decided before any row was read); `successObservation`
 * returns the step's `present_exact` observation, the proof an undo starts
 * from.
 *
 * Each of the three first passes the `during_compensation` failpoint: the
 * claim has committed and the undo's I/O (if any) is done, its record is
 * not. A crash there leaves the compensation `running`; its lease expires to
 * `unknown` and `reconcileUnknownCompensation` runs the idempotent undo again.
 */
import type { CompensationProof } from '../canonical/types';
import type { Tx } from '../db/tx';
import { failpoint } from '../failpoints';
import {
  compensationProofOf,
  completeTaskCreationCompensation,
  settleTaskCreationCompensation,
  type CompensationSettlement,
  type SettledCompensation,
} from '../store/compensation';
import {
  observedOf,
  ownedRowLocks,
  readOwnedRowsLocked,
  undoOwnedRowsLocked,
  type FoundOwnedRow,
  type OwnedRow,
} from '../store/effects/compensate-owned-rows';
import type { ObservedRow } from '../store/effects/recording';
import { takeLocks, type LockNeed } from '../store/effects/row-locks';
import type { CompensationClaim } from '../store/types';
import type { EffectDeps } from '../kinds/contract';
import { cleanupProofOf } from './cleanup-proof';

export interface RowsUndo {
  rows: OwnedRow[];
  /** Further rows read under lock (e.g. the session's runtime row), shared. */
  extraLocks?: LockNeed[];
  /** Under the locks: why the rows must not be undone here (their effect reaches beyond them), or null. */
  blocked?: (tx: Tx) => Promise<string | null>;
  /** Per-kind `detail` of the cleanup proof, should the rows transfer. */
  detail: Record<string, unknown>;
  /** Cleanup job reason when a row is foreign (default `effect_changed`). */
  transferReason?: string;
}

function beforeRecord(claim: CompensationClaim): Promise<void> {
  return failpoint('during_compensation', { kind: claim.kind, operationId: claim.operationId, stepId: claim.stepId });
}

/** A transfer of the rows as found, with the complete cleanup proof. */
function transferredOf(
  claim: CompensationClaim,
  spec: RowsUndo,
  found: FoundOwnedRow[],
  code: string,
  reason: string,
): CompensationSettlement {
  return {
    outcome: 'transferred',
    reason,
    rows: observedOf(found),
    transfer: { reason: code, proof: { ...cleanupProofOf(claim, reason, spec.rows, spec.detail) } },
  };
}

export async function settleRows(
  deps: EffectDeps,
  claim: CompensationClaim,
  spec: RowsUndo,
): Promise<SettledCompensation> {
  await beforeRecord(claim);
  return settleTaskCreationCompensation(deps.db, claim, {
    lock: (tx) => takeLocks(tx, [...ownedRowLocks(spec.rows), ...(spec.extraLocks ?? [])]),
    async settle(tx) {
      const found = await readOwnedRowsLocked(tx, spec.rows);
      const blockedBy = spec.blocked ? await spec.blocked(tx) : null;
      const foreign = found.filter((f) => f.presence === 'foreign');
      if (blockedBy !== null || foreign.length > 0) {
        const reason =
          blockedBy ?? `${foreign.map((f) => `${f.row.table} ${f.row.key}`).join(', ')} changed since the step`;
        const code = blockedBy !== null ? 'effect_beyond_rows' : (spec.transferReason ?? 'effect_changed');
        return transferredOf(claim, spec, found, code, reason);
      }
      const rows = await undoOwnedRowsLocked(tx, found);
      return { outcome: 'compensated', reason: 'operation-owned rows undone', rows };
    },
  });
}

/** Transfers a proof decided outside the rows (e.g. a touched worktree): the rows stay for the cleanup worker. */
export async function transferRows(
  deps: EffectDeps,
  claim: CompensationClaim,
  spec: RowsUndo,
  code: string,
  reason: string,
): Promise<SettledCompensation> {
  await beforeRecord(claim);
  return settleTaskCreationCompensation(deps.db, claim, {
    lock: (tx) => takeLocks(tx, [...ownedRowLocks(spec.rows), ...(spec.extraLocks ?? [])]),
    async settle(tx) {
      return transferredOf(claim, spec, await readOwnedRowsLocked(tx, spec.rows), code, reason);
    },
  });
}

export async function recordPlain(
  deps: EffectDeps,
  claim: CompensationClaim,
  outcome: Exclude<CompensationProof['outcome'], 'transferred'>,
  reason: string,
  rows: ObservedRow[] = [],
): Promise<SettledCompensation> {
  await beforeRecord(claim);
  await completeTaskCreationCompensation(deps.db, claim, compensationProofOf(claim, outcome, null, reason, rows));
  return { outcome, reason, cleanupJobId: null };
}

export function successObservation(claim: CompensationClaim): Record<string, unknown> | null {
  return claim.evidence?.effect === 'present_exact' ? claim.evidence.observation : null;
}

export function ownerOfClaim(claim: CompensationClaim): { operation_id: string; step_id: string } {
  return { operation_id: claim.operationId, step_id: claim.stepId };
}
