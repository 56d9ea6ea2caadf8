/**
 * RecoverTaskCreation's claim and release: the recovery-only operation lease
 * (`task_creation_operations.recovery_*`). No caller handle: the trusted actor
 * is an `operation_recovery` ActorBindingDocument derived from the retained
 * operation and this claim (docs/adr/0005-operation-recovery-actor.md).
 *
 * claimTaskCreationRecovery — one transaction. Locks workspace 1 (share),
 * operation 4.2 (the guard re-derives the stored ManifestHash and
 * ActorBindingHash), task 5.2, identity 6, steps 7, launch-dispatch claims
 * 8.2. Builds the RecoverySnapshot from those locked rows and asks the pure
 * `chooseRecoveryAction`:
 * - an invariant violation: typed `creation_state_conflict`, zero writes;
 * - `expectedAction` given (an operator's button in the ledger view, which
 *   showed that action) and the legal action now is another one (or none):
 *   typed `creation_state_conflict` naming both, zero writes — a stale page
 *   never runs an action its operator did not see;
 * - `claim_in_flight` (a live step/compensation claim) or `replay_terminal`:
 *   the decision is returned, zero writes (`replay_terminal` is read-only);
 * - another recovery claim whose lease is still live (database clock), any
 *   owner: typed `stale_claim`, zero writes;
 * - otherwise the claim is persisted: action, recovery generation + 1, owner,
 *   lease, and the recovery actor's binding hash.
 * finishTaskCreationRecovery — one transaction, operation 4.2 only: clears
 * owner and lease by compare-and-set on recovery generation and owner (the
 * action, generation and actor hash stay as the record of the last recovery).
 * A taken-over or already finished claim: typed `stale_claim`, zero writes.
 *
 * The claim fences its action: each Store call an action makes carries the
 * claim (`RecoveryFence`) and is refused with zero writes once the claim is
 * not the operation's live one (taken over, released or expired), exactly as
 * a stale step claim is; and every action re-verifies its own predicate.
 * A claim also raises the operation's generation (the recovery actor's
 * authority revision). RenewTaskCreationRecovery extends a live claim's lease
 * while a long action runs.
 */
import { actorBindingHash } from '../canonical/hash';
import type { ActorBindingDocument } from '../canonical/types';
import { validateActorBinding } from '../canonical/validate';
import { ConflictError, ValidationError } from '../domain/errors';
import { ACTOR_VARIANTS, type DispatchState, type RecoveryAction } from '../domain/vocab';
import { TIER } from '../db/lock-plan';
import { runTransaction, type Db, type Tx } from '../db/tx';
import { forceIndexSql } from '../db/dialect';
import { chooseRecoveryAction, type RecoveryDecision, type RecoverySnapshot } from '../runtime/recovery-action';
import { guardOperationLocked, lockTaskChainLocked, type OperationRow } from './operation-guard';
import { DEFAULT_LEASE_MS } from './step-claims';
import { lockStepsLocked } from './step-rows';

export interface RecoveryClaim {
  readonly operationId: string;
  readonly workspaceId: string;
  readonly action: RecoveryAction;
  /** `recovery_generation` after this claim (the fencing token). */
  readonly generation: number;
  readonly owner: string;
  readonly leaseExpiresAt: Date;
  readonly actorBindingHash: string;
}

export type ClaimRecoveryResult = ({ claimed: true } & RecoveryClaim) | { claimed: false; decision: RecoveryDecision };

/** What an observation outside the transaction proved about an `unknown` dispatch claim (dispatch recovery). */
export type DispatchProof = 'runtime' | 'no_dispatch' | null;

const MAX_LEASE_MS = 3_600_000;

/**
 * The OperationRecoveryActor of one claim: the sealed `operation_recovery`
 * variant, authority = the creation operation at its generation, lease
 * generation = the recovery generation this claim takes.
 */
export function recoveryActorDocument(
  op: Pick<OperationRow, 'id' | 'workspace_id' | 'generation'>,
  owner: string,
  recoveryGeneration: number,
): ActorBindingDocument {
  const sealed = ACTOR_VARIANTS.operation_recovery;
  return validateActorBinding({
    version: 1,
    variant: 'operation_recovery',
    principal_id: owner,
    workspace_id: op.workspace_id,
    auth_mode: sealed.auth_mode,
    authority_kind: sealed.authority_kind,
    authority_id: op.id,
    authority_revision: op.generation,
    lease_generation: recoveryGeneration,
  });
}

function checkOwner(owner: unknown): asserts owner is string {
  if (typeof owner !== 'string' || owner.length === 0 || owner.length > 200 || !/^[\x20-\x7e]+$/.test(owner)) {
    throw new ValidationError('/owner', 'must be 1-200 printable ASCII characters');
  }
}

function checkInput(operationId: unknown, owner: unknown, leaseMs: unknown): void {
  if (typeof operationId !== 'string' || !/^[0-9a-f-]{36}$/i.test(operationId)) {
    throw new ValidationError('/operation_id', 'must be a UUID');
  }
  checkOwner(owner);
  if (typeof leaseMs !== 'number' || !Number.isInteger(leaseMs) || leaseMs < 1 || leaseMs > MAX_LEASE_MS) {
    throw new ValidationError('/lease_ms', `must be an integer between 1 and ${MAX_LEASE_MS}`);
  }
}

interface RecoveryColumns {
  recovery_generation: number | string;
  recovery_owner: string | null;
  live: number | string | boolean;
}

/** The locked rows as the pure chooser's snapshot. Locks dispatch claims (8.2) in id order. */
async function snapshotLocked(tx: Tx, op: OperationRow, dispatchProof: DispatchProof): Promise<RecoverySnapshot> {
  await lockTaskChainLocked(tx, op, { externalIdKey: false });
  const steps = await lockStepsLocked(tx, op.id);
  const ids = await tx.rows<{ id: string }>(
    'SELECT id FROM task_launch_dispatch_claims WHERE creation_operation_id = ? ORDER BY id',
    [op.id],
  );
  for (const { id } of [...ids].sort((a, b) => (a.id < b.id ? -1 : 1))) {
    tx.lockRow(TIER.DISPATCH_CLAIM, 'task_launch_dispatch_claims', id);
  }
  const claims = await tx.rows<{ state: DispatchState; deletion_operation_id: string | null }>(
    `SELECT state, deletion_operation_id FROM task_launch_dispatch_claims ${forceIndexSql(tx.dialect, 'uq_launch_dispatch')}
      WHERE creation_operation_id = ? ORDER BY id FOR UPDATE`,
    [op.id],
  );
  if (claims.length > 1) {
    // A plan has at most one launch intent, so at most one dispatch claim.
    throw new ConflictError('creation_state_conflict', 'more than one launch dispatch claim for one operation', {
      operation_id: op.id,
    });
  }
  const d = claims[0];
  return {
    operationState: op.state,
    steps: steps.map((s) => ({
      kind: s.kind,
      state: s.state,
      compensationState: s.compensation_state as RecoverySnapshot['steps'][number]['compensationState'],
    })),
    // `preparing-release` is exactly "release unfinished": the release's commit returns the operation to preparing.
    releaseUnfinished: op.state === 'preparing-release',
    phaseBCommitted: op.result_event_id !== null,
    dispatch:
      d === undefined
        ? null
        : { state: d.state, deletionFence: d.deletion_operation_id !== null, proof: dispatchProof },
  };
}

export async function claimTaskCreationRecovery(
  db: Db,
  operationId: string,
  owner: string,
  leaseMs: number = DEFAULT_LEASE_MS,
  options: { dispatchProof?: DispatchProof; expectedAction?: RecoveryAction } = {},
): Promise<ClaimRecoveryResult> {
  checkInput(operationId, owner, leaseMs);
  const dispatchProof = options.dispatchProof ?? null;
  return runTransaction(db, 'RecoverTaskCreation.Claim', async (tx) => {
    const { op } = await guardOperationLocked(tx, { kind: 'operation', operationId, actor: owner });
    const snapshot = await snapshotLocked(tx, op, dispatchProof);
    const decision = chooseRecoveryAction(snapshot);
    const expected = options.expectedAction;
    if (expected !== undefined && decision.action !== expected) {
      const legal = decision.action ?? `none (${decision.reason})`;
      throw new ConflictError(
        'creation_state_conflict',
        `the legal recovery action is now ${legal}, not ${expected}: the operation changed since it was read`,
        { operation_id: op.id, state: op.state, expected_action: expected, legal_action: decision.action },
      );
    }
    if (decision.action === null && decision.reason === 'creation_state_conflict') {
      throw new ConflictError('creation_state_conflict', `no recovery action is legal: ${decision.detail}`, {
        operation_id: op.id,
        state: op.state,
        violation: decision.detail,
      });
    }
    if (decision.action === null || decision.action === 'replay_terminal') return { claimed: false, decision };

    const current = await tx.one<RecoveryColumns>(
      `SELECT recovery_generation, recovery_owner,
              CASE WHEN recovery_lease_expires_at > ${tx.now} THEN 1 ELSE 0 END AS live
         FROM task_creation_operations WHERE id = ?`,
      [op.id],
    );
    const generation = Number(current!.recovery_generation);
    if (Number(current!.live) === 1) {
      throw new ConflictError('stale_claim', 'another recovery claim on this operation is live', {
        operation_id: op.id,
        recovery_owner: current!.recovery_owner,
        recovery_generation: generation,
      });
    }
    const next = generation + 1;
    // The operation's generation counts its recovery claims: the recovery actor's authority revision is the
    // operation at this generation, and every action's Store call re-checks the claim (RecoveryFence).
    const bindingHash = actorBindingHash(recoveryActorDocument({ ...op, generation: op.generation + 1 }, owner, next));
    const changed = await tx.exec(
      `UPDATE task_creation_operations SET recovery_action = ?, recovery_generation = ?, recovery_owner = ?,
              recovery_lease_expires_at = ${tx.nowPlusMs}, recovery_actor_binding_hash = ?, generation = generation + 1,
              updated_at = ${tx.now}
        WHERE id = ? AND recovery_generation = ?`,
      [decision.action, next, owner, leaseMs, bindingHash, op.id, generation],
    );
    if (changed !== 1) {
      throw new ConflictError('stale_claim', 'recovery claim changed while being claimed', { operation_id: op.id });
    }
    const row = await tx.one<{ recovery_lease_expires_at: Date }>(
      'SELECT recovery_lease_expires_at FROM task_creation_operations WHERE id = ?',
      [op.id],
    );
    return {
      claimed: true,
      operationId: op.id,
      workspaceId: op.workspace_id,
      action: decision.action,
      generation: next,
      owner,
      leaseExpiresAt: new Date(row!.recovery_lease_expires_at),
      actorBindingHash: bindingHash,
    };
  });
}

/**
 * RenewTaskCreationRecovery — the heartbeat of a recovery action that takes
 * a while (compensation with Git, provider calls): one transaction, operation
 * 4.2 only; extends the lease of the live claim of this generation and owner
 * (compare-and-set). A claim that is not live any more: typed `stale_claim`,
 * zero writes — the action's next Store call is refused too.
 */
export async function renewTaskCreationRecovery(
  db: Db,
  claim: Pick<RecoveryClaim, 'operationId' | 'generation' | 'owner'>,
  leaseMs: number = DEFAULT_LEASE_MS,
): Promise<void> {
  checkOwner(claim.owner);
  await runTransaction(db, 'RecoverTaskCreation.Renew', async (tx) => {
    tx.lockOperationRow('task_creation_operations', claim.operationId);
    const changed = await tx.exec(
      `UPDATE task_creation_operations SET recovery_lease_expires_at = ${tx.nowPlusMs}, updated_at = ${tx.now}
        WHERE id = ? AND recovery_generation = ? AND recovery_owner = ? AND recovery_lease_expires_at > ${tx.now}`,
      [leaseMs, claim.operationId, claim.generation, claim.owner],
    );
    if (changed !== 1) {
      throw new ConflictError('stale_claim', 'recovery claim is no longer live', {
        operation_id: claim.operationId,
        recovery_generation: claim.generation,
      });
    }
  });
}

export async function finishTaskCreationRecovery(
  db: Db,
  claim: Pick<RecoveryClaim, 'operationId' | 'generation' | 'owner'>,
): Promise<void> {
  checkOwner(claim.owner);
  await runTransaction(db, 'RecoverTaskCreation.Finish', async (tx) => {
    tx.lockOperationRow('task_creation_operations', claim.operationId);
    const changed = await tx.exec(
      `UPDATE task_creation_operations SET recovery_owner = NULL, recovery_lease_expires_at = NULL, updated_at = ${tx.now}
        WHERE id = ? AND recovery_generation = ? AND recovery_owner = ?`,
      [claim.operationId, claim.generation, claim.owner],
    );
    if (changed !== 1) {
      throw new ConflictError('stale_claim', 'recovery claim is stale: generation or owner no longer matches', {
        operation_id: claim.operationId,
        recovery_generation: claim.generation,
      });
    }
  });
}
