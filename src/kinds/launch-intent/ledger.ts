/**
 * ArmExactLaunchIntent: the `launch_intent` step's own effect. The retained
 * step row is the sole intent; arming it with exact evidence in one
 * transaction is the whole effect. Plus its read-only observation and
 * Complete's verifier.
 *
 * Locks, in order: workspace 1, operation 4.2, task 5.2, identity 6, steps 7
 * (`lockClaimedLocked`); the launch-dispatch claim of (operation, task,
 * session) (8.2, shared); the session row (9, shared); its runtime row (10,
 * shared).
 * States: launch step `running -> armed` when PreLaunchArmPredicate holds
 * (every other step succeeded, nothing to compensate; otherwise
 * `creation_state_conflict`, zero writes) and no dispatch claim, runtime or
 * started session exists; with any of those the step becomes `unknown`
 * (`conflict`): a pre-Complete runtime is for cleanup, never for arming.
 * Evidence: `intent_sha256` = domain hash of the canonical
 * `{operation_id, step_id, request}`, `dispatched: false`. No event.
 */
import { canonicalJson, parseCanonical, sameJson } from '../../canonical/canonical-json';
import { domainHash } from '../../canonical/hash';
import type { LaunchIntentRequest, StepEvidence } from '../../canonical/types';
import { validateStepEvidence } from '../../canonical/validate';
import { ConflictError } from '../../domain/errors';
import { TIER } from '../../db/lock-plan';
import { runTransaction, type Db, type Tx } from '../../db/tx';
import { lockClaimedLocked, type ClaimContext } from '../../store/claimed';
import { nonLaunchStepsReady } from '../../store/step-rows';
import type { StepClaim, StepRow } from '../../store/types';
import {
  effectMismatch,
  failWithRowsLocked,
  ownerOf,
  presentEvidenceOf,
  recordSuccessLocked,
  requestOf,
  rowSetEvidenceOf,
  stepRequestOf,
  type EffectObservation,
  type EffectOutcome,
  type EffectOwner,
  type ObservedRow,
} from '../../store/effects/recording';
import { readSession, runtimeExists, SESSION_COLUMNS } from '../../store/effects/row-documents';
import { dbReader, rowRead, takeLocks, txReader, type LockNeed, type Reader } from '../../store/effects/row-locks';

/** The launch's dispatch claim of (operation, task, session): locked, then read (ADR 0032). */
const CLAIM_WHERE = 'creation_operation_id = ? AND task_id = ? AND session_id = ?';

export const LAUNCH_INTENT_DOMAIN = 'kandev/task-launch-intent/v1';

export function launchIntentSha256(owner: EffectOwner, request: LaunchIntentRequest): string {
  return domainHash(
    LAUNCH_INTENT_DOMAIN,
    canonicalJson({ operation_id: owner.operation_id, request, step_id: owner.step_id }),
  );
}

function observationOf(owner: EffectOwner, req: LaunchIntentRequest) {
  return { intent_sha256: launchIntentSha256(owner, req), dispatched: false };
}

/**
 * The arming evidence of a promoted `launch_intent` (`store/deferred-launch.ts`):
 * the same exact-intent proof a step worker records. The promotion's
 * transaction has already checked that no dispatch, runtime or started
 * session exists (its session rows were a clean slate).
 */
export function armedIntentEvidence(claim: StepClaim): StepEvidence {
  return presentEvidenceOf(claim, observationOf(ownerOf(claim), requestOf(claim, 'launch_intent')));
}

interface World {
  dispatch: boolean;
  runtime: boolean;
  sessionStarted: boolean;
}

async function readWorld(read: Reader, owner: EffectOwner, req: LaunchIntentRequest): Promise<World> {
  // Independent reads, issued together: in a transaction they travel in one round trip (Tx.batch).
  const [claims, session, runtime] = await Promise.all([
    read(rowRead('task_launch_dispatch_claims', 'id', CLAIM_WHERE), [owner.operation_id, req.task_id, req.session_id]),
    readSession(read, req.session_id),
    runtimeExists(read, req.session_id),
  ]);
  return {
    dispatch: claims.length > 0,
    runtime,
    sessionStarted: session !== null && session.state !== 'prepared',
  };
}

function worldRows(req: LaunchIntentRequest, owner: EffectOwner): ObservedRow[] {
  return [
    { table: 'executors_running', key: req.session_id, row_sha256: null },
    {
      table: 'task_launch_dispatch_claims',
      key: `${owner.operation_id}:${req.task_id}:${req.session_id}`,
      row_sha256: null,
    },
  ];
}

function lockNeeds(owner: EffectOwner, req: LaunchIntentRequest): LockNeed[] {
  return [
    {
      tier: TIER.DISPATCH_CLAIM,
      table: 'task_launch_dispatch_claims',
      key: `${owner.operation_id}:${req.task_id}:${req.session_id}`,
      where: CLAIM_WHERE,
      params: [owner.operation_id, req.task_id, req.session_id],
      mode: 'share',
      reads: 'id',
    },
    {
      tier: TIER.SESSION,
      table: 'task_sessions',
      key: req.session_id,
      where: 'id = ?',
      params: [req.session_id],
      mode: 'share',
      reads: SESSION_COLUMNS,
    },
    {
      tier: TIER.RUNTIME,
      table: 'executors_running',
      key: `session:${req.session_id}`,
      where: 'session_id = ?',
      params: [req.session_id],
      mode: 'share',
      reads: 'id',
    },
  ];
}

export async function armExactLaunchIntent(db: Db, claim: StepClaim): Promise<EffectOutcome> {
  return runTransaction(db, 'ArmExactLaunchIntent', (tx) => armExactLaunchIntentLocked(tx, claim));
}

/**
 * The arming and its record inside the caller's transaction (which holds no lock above tier 7);
 * `claimed`: the context of a claim made earlier in the same transaction (nothing is re-read).
 */
export async function armExactLaunchIntentLocked(
  tx: Tx,
  claim: StepClaim,
  claimed?: ClaimContext,
): Promise<EffectOutcome> {
  const req = requestOf(claim, 'launch_intent');
  const owner = ownerOf(claim);
  const ctx = claimed ?? (await lockClaimedLocked(tx, claim));
  if (!nonLaunchStepsReady(ctx.steps)) {
    throw new ConflictError('creation_state_conflict', 'PreLaunchArmPredicate does not hold', {
      operation_id: claim.operationId,
    });
  }
  // Locks first, then the reads, in one round trip (Tx.batch keeps issue order). In a batch that keeps its answers
  // (phase A follows, ADR 0030) a read this transaction already answered since its last write to the table — the
  // session's read-back by `session_prepare`, a row it inserted and holds — is answered from there (ADR 0044).
  const [, w] = await tx.answerFromKept(() =>
    Promise.all([takeLocks(tx, lockNeeds(owner, req)), readWorld(txReader(tx), owner, req)]),
  );
  if (w.dispatch || w.runtime || w.sessionStarted) {
    return failWithRowsLocked(
      tx,
      ctx,
      claim,
      'ambiguous',
      'runtime_present',
      'a dispatch or runtime exists before Complete',
      worldRows(req, owner),
    );
  }
  return recordSuccessLocked(tx, ctx, claim, presentEvidenceOf(claim, observationOf(owner, req)));
}

/**
 * Read-only: the step armed with exactly this intent and no dispatch/runtime
 * -> present; not armed and no dispatch/runtime -> absent; else conflict.
 * Re-reads the step row (the caller's copy may be stale).
 */
export async function observeLaunchIntent(db: Db, step: StepRow): Promise<EffectObservation> {
  const req = stepRequestOf(step, 'launch_intent');
  const owner = ownerOf(step);
  const read = dbReader(db);
  const [now] = await read<{ state: string; evidence_json: string | null }>(
    'SELECT state, evidence_json FROM task_creation_steps WHERE id = ?',
    [step.id],
  );
  const w = await readWorld(read, owner, req);
  const quiet = !w.dispatch && !w.runtime && !w.sessionStarted;
  const want = observationOf(owner, req);
  let exact = false;
  if (now?.state === 'armed' && now.evidence_json !== null) {
    try {
      const ev = validateStepEvidence(parseCanonical(now.evidence_json));
      exact = ev.effect === 'present_exact' && sameJson(ev.observation, want);
    } catch {
      exact = false;
    }
  }
  if (quiet && exact) return { effect: 'present_exact', evidence: presentEvidenceOf(step, want) };
  const rows = worldRows(req, owner);
  if (quiet && now !== undefined && now.state !== 'armed') {
    return {
      effect: 'absent_proven',
      evidence: rowSetEvidenceOf(step, 'absent_proven', 'the intent is not armed', rows),
    };
  }
  const reason = quiet ? 'armed with different evidence' : 'a dispatch or runtime exists';
  return { effect: 'conflict', evidence: rowSetEvidenceOf(step, 'conflict', reason, rows) };
}

export function launchIntentLocks(step: StepRow): LockNeed[] {
  return lockNeeds(ownerOf(step), stepRequestOf(step, 'launch_intent'));
}

export async function verifyLaunchIntentLocked(
  tx: Tx,
  step: StepRow,
  evidence: { observation: Record<string, unknown> },
): Promise<void> {
  const req = stepRequestOf(step, 'launch_intent');
  const owner = ownerOf(step);
  await takeLocks(tx, launchIntentLocks(step));
  if (!sameJson(observationOf(owner, req), evidence.observation)) {
    throw effectMismatch(step, 'evidence does not prove this exact intent');
  }
  const w = await readWorld(txReader(tx), owner, req);
  if (w.dispatch || w.runtime || w.sessionStarted)
    throw effectMismatch(step, 'a dispatch or runtime exists before Complete');
}

/** The rows `armExactLaunchIntentLocked` will lock (tiers 8.2–10), for a batch that takes them first (store/ledger-step.ts). */
export function launchIntentApplyLocks(_tx: Tx, step: StepRow): Promise<LockNeed[]> {
  return Promise.resolve(launchIntentLocks(step));
}
