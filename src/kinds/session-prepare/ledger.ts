/**
 * ApplySessionPrepare: the `session_prepare` effect and its success, in one
 * transaction; plus its read-only observation and Complete's verifier; and
 * `materializeSessionLocked`, the same rows written inside a deferred start's
 * promotion (store/deferred-launch.ts), which has no claimed step.
 *
 * Locks, in order: workspace 1, operation 4.2, task 5.2, identity 6, steps 7
 * (`lockClaimedLocked`); the session row (9, FOR UPDATE); its
 * `executors_running` row by session (10, shared); the task environment
 * (11.1, shared); one resource marker per resource key (14, FOR UPDATE,
 * ascending key).
 * States: step `running -> succeeded`, inserting the `task_sessions` row
 * (state `prepared`, owned by `(operation_id, step_id)`) and one
 * `task_resource_markers` row per resource key (kind `session`, marker =
 * domain hash of operation, step and key). Otherwise nothing but the step is
 * written: a runtime row for the session or a foreign session/marker row ->
 * `unknown` (`conflict`); the task environment gone -> `failed`
 * (`absent_proven`). No event.
 */
import { sameJson } from '../../canonical/canonical-json';
import type { SessionPrepareRequest, StepEvidence } from '../../canonical/types';
import { ConflictError } from '../../domain/errors';
import { TIER } from '../../db/lock-plan';
import { runTransaction, type Db, type Statement, type Tx } from '../../db/tx';
import { lockClaimedLocked, type ClaimContext } from '../../store/claimed';
import type { StepClaim, StepRow } from '../../store/types';
import {
  effectMismatch,
  failWithRowsLocked,
  ownerOf,
  presentEvidenceOf,
  recordSuccessLocked,
  requestOf,
  resourceMarkerSha256,
  rowSetEvidenceOf,
  stepRequestOf,
  type EffectObservation,
  type EffectOutcome,
  type EffectOwner,
  observedRowsOf,
  type OwnRow,
} from '../../store/effects/recording';
import {
  readEnvironment,
  readMarker,
  readSession,
  rowHash,
  runtimeExists,
  sameRow,
  type MarkerDoc,
  type SessionDoc,
  SESSION_COLUMNS,
  ENVIRONMENT_COLUMNS,
  MARKER_COLUMNS,
  markerInsert,
} from '../../store/effects/row-documents';
import {
  dbReader,
  EFFECT_ROW_UNIQUES,
  firstReadsOf,
  insertAnswering,
  takeLocks,
  txReader,
  type LockNeed,
  type Reader,
} from '../../store/effects/row-locks';

type Req = SessionPrepareRequest;

interface Expected {
  session: SessionDoc;
  markers: MarkerDoc[];
}

export function expectedSessionRows(req: Req, owner: EffectOwner): Expected {
  return {
    session: {
      id: req.session_id,
      task_id: req.task_id,
      workspace_id: req.workspace_id,
      environment_id: req.task_environment_id,
      executor_id: req.executor_id,
      executor_profile_id: req.executor_profile_id,
      agent_profile_id: req.agent_profile_id,
      launch_config_sha256: req.launch_config_sha256,
      state: 'prepared',
      ...owner,
    },
    markers: req.resource_keys.map((k) => ({
      resource_key: k,
      workspace_id: req.workspace_id,
      task_id: req.task_id,
      ...owner,
      kind: 'session',
      marker_sha256: resourceMarkerSha256(owner.operation_id, owner.step_id, k),
    })),
  };
}

type Presence = 'absent' | 'ours' | 'foreign';
const presence = (actual: unknown, expected: unknown): Presence =>
  actual === null ? 'absent' : sameRow(actual, expected) ? 'ours' : 'foreign';

interface World {
  session: SessionDoc | null;
  markers: (MarkerDoc | null)[];
  runtime: boolean;
  environmentOk: boolean;
}

async function readWorld(read: Reader, req: Req, exp: Expected): Promise<World> {
  // Independent reads, issued together: in a transaction they travel in one round trip (Tx.batch).
  const [session, runtime, env, markers] = await Promise.all([
    readSession(read, req.session_id),
    runtimeExists(read, req.session_id),
    readEnvironment(read, req.task_environment_id),
    Promise.all(exp.markers.map((m) => readMarker(read, m.resource_key))),
  ]);
  const environmentOk =
    env !== null && env.workspace_id === req.workspace_id && env.task_id === req.task_id && env.kind === 'task';
  return { session, markers, runtime, environmentOk };
}

function ownRows(exp: Expected, w: World): OwnRow<Presence>[] {
  return [
    { table: 'task_sessions', key: exp.session.id, actual: w.session, p: presence(w.session, exp.session) },
    ...exp.markers.map((m, i) => {
      const a = w.markers[i] ?? null;
      return { table: 'task_resource_markers', key: m.resource_key, actual: a, p: presence(a, m) };
    }),
  ];
}

function observationOf(exp: Expected) {
  return {
    session_row_sha256: rowHash(exp.session),
    resource_markers: exp.markers.map((m) => ({ resource_key: m.resource_key, marker_sha256: m.marker_sha256 })),
    runtime_absent: true,
  };
}

function lockNeeds(req: Req, exclusive: boolean): LockNeed[] {
  const own = exclusive ? 'update' : 'share';
  return [
    {
      tier: TIER.SESSION,
      table: 'task_sessions',
      key: req.session_id,
      where: 'id = ?',
      params: [req.session_id],
      mode: own,
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
    {
      tier: TIER.ENVIRONMENT,
      table: 'task_environments',
      key: req.task_environment_id,
      where: 'id = ?',
      params: [req.task_environment_id],
      mode: 'share',
      reads: ENVIRONMENT_COLUMNS,
    },
    ...req.resource_keys.map((k): LockNeed => ({
      tier: TIER.MARKER,
      table: 'task_resource_markers',
      key: k,
      where: 'resource_key = ?',
      params: [k],
      mode: own,
      reads: MARKER_COLUMNS,
    })),
  ];
}

/**
 * Inserts the rows `w` lacks and reads them back, without waiting: inserts and read-back travel with the
 * statements issued next (the record, the next step's claim and reads), and the read-back is checked before
 * COMMIT (`Tx.checkLater`): rows that do not read back exactly roll the whole transaction back.
 */
function insertSessionRowsLocked(tx: Tx, req: Req, exp: Expected, w: World): void {
  const read = txReader(tx);
  // The inserts and the read-back are issued together, in that order.
  const writes: Promise<number>[] = [];
  if (w.session === null) {
    const s = exp.session;
    writes.push(
      insertAnswering(
        tx,
        {
          sql: `INSERT INTO task_sessions (id, task_id, workspace_id, environment_id, executor_id, executor_profile_id,
                  agent_profile_id, launch_config_sha256, state, operation_id, step_id, created_at, updated_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ${tx.now}, ${tx.now})`,
          params: [
            s.id,
            s.task_id,
            s.workspace_id,
            s.environment_id,
            s.executor_id,
            s.executor_profile_id,
            s.agent_profile_id,
            s.launch_config_sha256,
            s.state,
            s.operation_id,
            s.step_id,
          ],
        },
        { table: 'task_sessions', columns: SESSION_COLUMNS, where: 'id = ?', params: [s.id] },
      ),
    );
  }
  for (const [i, m] of exp.markers.entries()) {
    if (w.markers[i]) continue;
    writes.push(
      insertAnswering(tx, markerInsert(tx, m), {
        table: 'task_resource_markers',
        columns: MARKER_COLUMNS,
        where: 'resource_key = ?',
        params: [m.resource_key],
      }),
    );
  }
  tx.checkLater(
    Promise.all([readWorld(read, req, exp), ...writes]).then(([after]) => {
      if (ownRows(exp, after).some((r) => r.p !== 'ours')) throw new Error('session rows did not read back exactly');
    }),
  );
}

export async function applySessionPrepare(db: Db, claim: StepClaim): Promise<EffectOutcome> {
  return runTransaction(db, 'ApplySessionPrepare', (tx) => applySessionPrepareLocked(tx, claim), {
    restartOnUnique: EFFECT_ROW_UNIQUES,
  });
}

/**
 * The effect and its record inside the caller's transaction (which holds no lock above tier 7);
 * `claimed`: the context of a claim made earlier in the same transaction (nothing is re-read).
 */
export async function applySessionPrepareLocked(
  tx: Tx,
  claim: StepClaim,
  claimed?: ClaimContext,
): Promise<EffectOutcome> {
  const req = requestOf(claim, 'session_prepare');
  const exp = expectedSessionRows(req, ownerOf(claim));
  const ctx = claimed ?? (await lockClaimedLocked(tx, claim));
  const read = txReader(tx);
  // Locks first, then the reads, in one round trip (Tx.batch keeps issue order).
  const [, w] = await Promise.all([takeLocks(tx, lockNeeds(req, true)), readWorld(read, req, exp)]);
  const own = ownRows(exp, w);
  const rows = observedRowsOf(own);
  if (w.runtime) {
    const runtimeRow = { table: 'executors_running', key: req.session_id, row_sha256: null };
    return failWithRowsLocked(tx, ctx, claim, 'ambiguous', 'runtime_present', 'a runtime exists for the session', [
      ...rows,
      runtimeRow,
    ]);
  }
  if (own.some((r) => r.p === 'foreign')) {
    return failWithRowsLocked(
      tx,
      ctx,
      claim,
      'ambiguous',
      'foreign_row',
      'a session or marker row is held by someone else',
      rows,
    );
  }
  if (!w.environmentOk) {
    const cls = own.every((r) => r.p === 'absent') ? 'permanent' : 'ambiguous';
    const envRow = { table: 'task_environments', key: req.task_environment_id, row_sha256: null };
    return failWithRowsLocked(tx, ctx, claim, cls, 'environment_missing', 'the task environment is gone', [
      ...rows,
      envRow,
    ]);
  }
  insertSessionRowsLocked(tx, req, exp, w);
  return recordSuccessLocked(tx, ctx, claim, presentEvidenceOf(claim, observationOf(exp)));
}

/**
 * A deferred start's promotion (`store/deferred-launch.ts`) records the
 * success evidence of its `session_prepare` with the step row, before the
 * rows themselves (`materializeSessionLocked`): the same proof a step worker
 * records, which depends only on the request and the owner.
 */
export function sessionPrepareEvidence(claim: StepClaim): StepEvidence {
  return presentEvidenceOf(
    claim,
    observationOf(expectedSessionRows(requestOf(claim, 'session_prepare'), ownerOf(claim))),
  );
}

/**
 * The promotion's session rows, written inside its transaction once it holds
 * tiers up to the steps (7). Takes this kind's locks (9, 10, 11.1, 14) and
 * writes only onto a clean slate: every row absent, no runtime, the task's
 * own environment; anything else is a `creation_state_conflict` (the caller
 * rolls back, zero writes).
 */
export async function materializeSessionLocked(tx: Tx, claim: StepClaim): Promise<void> {
  const req = requestOf(claim, 'session_prepare');
  const exp = expectedSessionRows(req, ownerOf(claim));
  const [, w] = await Promise.all([takeLocks(tx, lockNeeds(req, true)), readWorld(txReader(tx), req, exp)]);
  const clean = !w.runtime && w.environmentOk && ownRows(exp, w).every((r) => r.p === 'absent');
  if (!clean) {
    throw new ConflictError('creation_state_conflict', 'the session of a deferred start is not a clean slate', {
      session_id: req.session_id,
      runtime: w.runtime,
      environment_ok: w.environmentOk,
    });
  }
  insertSessionRowsLocked(tx, req, exp, w);
}

/** Read-only: exact rows and no runtime -> present; all absent and no runtime -> absent; else conflict. */
export async function observeSessionPrepare(db: Db, step: StepRow): Promise<EffectObservation> {
  const req = stepRequestOf(step, 'session_prepare');
  const exp = expectedSessionRows(req, ownerOf(step));
  const w = await readWorld(dbReader(db), req, exp);
  const own = ownRows(exp, w);
  if (!w.runtime && own.every((r) => r.p === 'ours')) {
    return { effect: 'present_exact', evidence: presentEvidenceOf(step, observationOf(exp)) };
  }
  const rows = observedRowsOf(own);
  if (!w.runtime && own.every((r) => r.p === 'absent')) {
    return {
      effect: 'absent_proven',
      evidence: rowSetEvidenceOf(step, 'absent_proven', 'no session row or marker exists', rows),
    };
  }
  const reason = w.runtime ? 'a runtime exists for the session' : 'session rows are partial or foreign';
  return { effect: 'conflict', evidence: rowSetEvidenceOf(step, 'conflict', reason, rows) };
}

export function sessionPrepareLocks(step: StepRow): LockNeed[] {
  return lockNeeds(stepRequestOf(step, 'session_prepare'), false);
}

export async function verifySessionPrepareLocked(
  tx: Tx,
  step: StepRow,
  evidence: { observation: Record<string, unknown> },
): Promise<void> {
  const req = stepRequestOf(step, 'session_prepare');
  const exp = expectedSessionRows(req, ownerOf(step));
  const [, w] = await Promise.all([takeLocks(tx, sessionPrepareLocks(step)), readWorld(txReader(tx), req, exp)]);
  const bad = ownRows(exp, w).find((r) => r.p !== 'ours');
  if (bad)
    throw effectMismatch(step, `${bad.table} ${bad.key} is ${bad.p === 'absent' ? 'missing' : 'not the recorded row'}`);
  if (w.runtime) throw effectMismatch(step, 'a runtime exists for the session before Complete');
  if (!sameJson(observationOf(exp), evidence.observation)) {
    throw effectMismatch(step, 'evidence does not repeat the session rows byte-exactly');
  }
}

/** The rows `applySessionPrepareLocked` will lock (tiers 9–14), for a batch that takes them first (store/ledger-step.ts). */
/** The reads `applySessionPrepareLocked` makes first (its world), from the step row alone (ADR 0026). */
export function sessionPrepareApplyReads(step: StepRow): Statement[] {
  const req = stepRequestOf(step, 'session_prepare');
  return firstReadsOf((read) => readWorld(read, req, expectedSessionRows(req, ownerOf(step))));
}

export function sessionPrepareApplyLocks(_tx: Tx, step: StepRow): Promise<LockNeed[]> {
  return Promise.resolve(lockNeeds(stepRequestOf(step, 'session_prepare'), true));
}
