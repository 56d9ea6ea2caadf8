/**
 * The ledger checks of `taskledger verify`, on one operation's rows as read
 * (verify/ledger-page.ts). Pure: re-derives every stored hash from the stored
 * bytes with the same functions the Store writes them with, and checks the
 * invariants the protocol promises once a creation has ended:
 * - bindings: ManifestHash and ActorBindingHash from the stored plan and
 *   actor documents, bound to the operation's task and workspace;
 * - steps: the plan's step set, each request / request hash / idempotency
 *   key, each evidence envelope against its hash and its step, each
 *   compensation proof against its hash;
 * - events: each payload against its hash; a completed operation has exactly
 *   one `task.created`, revision one, the operation's result event, and its
 *   task is `completed`; an unfinished or aborted one has none;
 * - a deferred start's promoted session/launch pair (plan/session-launch.ts):
 *   only in a completed creation, only with its one
 *   `task.dependencies_resolved` event (after revision one), and present once
 *   that event was delivered for a live task; a created task that still
 *   awaits its blockers has no such event, and not all its blockers done;
 * - dispatch claims: only for a completed operation, never created before the
 *   event that announced the launch (`task.created`, or for a deferred start
 *   `task.dependencies_resolved`), with the dispatch key and the launch intent's request
 *   hash, and evidence that hashes and names this claim;
 * - ended steps: a completed creation's non-launch steps all `succeeded`
 *   and its launch intent `armed` (or `cancelled` by workspace deletion); an
 *   aborted creation's steps all pass Abort's own rule (`abortBlocker`:
 *   nothing running or unknown, every effect compensated or transferred) and
 *   its task row is gone;
 * - cleanup jobs: each proof against its hash;
 * - external-ID releases against their creation (verify/release-checks.ts).
 */
import { canonicalJson, parseCanonical } from '../canonical/canonical-json';
import { cleanupProofHash, compensationProofHash, domainHash, evidenceHash, payloadHash } from '../canonical/hash';
import type { CreationPlan } from '../canonical/types';
import { validateCompensationProof, validateStepEvidence } from '../canonical/validate';
import { promotedSteps } from '../plan/session-launch';
import { abortBlocker } from '../store/abort';
import { DISPATCH_EVIDENCE_DOMAIN, dispatchIdempotencyKey } from '../store/launch-dispatch';
import { verifyStoredBindings } from '../store/operation-guard';
import { verifyStepRequest, verifyStepSet } from '../store/step-rows';
import type { Drift, DriftCode } from './drift';
import type { DispatchClaimRow, OperationRecord, VerifyStepRow } from './ledger-page';
import { checkReleases } from './release-checks';

type Emit = (code: DriftCode, subject: string, message: string) => void;

const RESOLVED = 'task.dependencies_resolved';

/** The error's message, with the underlying cause a Store error carries in its detail. */
function messageOf(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = (err as { detail?: { cause?: unknown } }).detail?.cause;
  return typeof cause === 'string' ? `${err.message} (${cause})` : err.message;
}

/** Runs `check`; a throw becomes one finding. */
function guard(emit: Emit, code: DriftCode, subject: string, check: () => void): void {
  try {
    check();
  } catch (err) {
    const message = messageOf(err);
    // The Store's errors name their step already; say it once.
    emit(code, subject, message.startsWith(`${subject}: `) ? message.slice(subject.length + 2) : message);
  }
}

const stepSubject = (s: VerifyStepRow) => `step ${s.kind}/${s.step_key}`;

/**
 * A stored JSON document and its hash column: both set or both null, and the
 * parsed, validated document re-derives the stored hash.
 */
function checkHashed(
  emit: Emit,
  code: DriftCode,
  subject: string,
  what: string,
  stored: { json: string | null; sha256: string | null },
  rehash: (doc: unknown) => string,
): void {
  if ((stored.json === null) !== (stored.sha256 === null)) {
    emit(code, subject, `${what} and its hash are not both present`);
    return;
  }
  if (stored.json === null) return;
  guard(emit, code, subject, () => {
    if (rehash(parseCanonical(stored.json!)) !== stored.sha256)
      throw new Error(`${what} does not hash to its stored hash`);
  });
}

function checkStep(emit: Emit, step: VerifyStepRow, plan: CreationPlan | null): void {
  const subject = stepSubject(step);
  if (plan) guard(emit, 'step_request', subject, () => verifyStepRequest(step, plan));
  const expected = { kind: step.kind, step_key: step.step_key, request_sha256: step.request_sha256 };
  checkHashed(
    emit,
    'step_evidence',
    subject,
    'evidence',
    { json: step.evidence_json, sha256: step.evidence_sha256 },
    (doc) => evidenceHash(validateStepEvidence(doc, expected)),
  );
  checkHashed(
    emit,
    'compensation_proof',
    subject,
    'compensation proof',
    { json: step.compensation_evidence_json, sha256: step.compensation_evidence_sha256 },
    (doc) => compensationProofHash(validateCompensationProof(doc, expected)),
  );
}

function checkEvents(emit: Emit, rec: OperationRecord): void {
  for (const e of rec.events) {
    guard(emit, 'event_payload', `event ${e.event_id}`, () => {
      if (payloadHash(parseCanonical(e.payload_json)) !== e.payload_sha256) {
        throw new Error('payload does not hash to payload_sha256');
      }
    });
  }
  const { op } = rec;
  const created = rec.events.filter((e) => e.type === 'task.created');
  const resolved = rec.events.filter((e) => e.type === RESOLVED);
  if (op.state !== 'completed') {
    for (const e of [...created, ...resolved]) {
      emit('creation_event', `event ${e.event_id}`, `${e.type} for a ${op.state} operation`);
    }
    return;
  }
  if (resolved.length > 1) emit('creation_event', `operation ${op.id}`, `${resolved.length} ${RESOLVED} events`);
  for (const e of resolved) {
    if (e.revision <= 1 || e.task_id !== op.task_id) {
      emit('creation_event', `event ${e.event_id}`, `${RESOLVED} at revision ${e.revision} of task ${e.task_id}`);
    }
  }
  if (created.length !== 1) {
    emit('creation_event', `operation ${op.id}`, `completed with ${created.length} task.created events`);
    return;
  }
  const event = created[0]!;
  if (event.revision !== 1)
    emit('creation_event', `event ${event.event_id}`, `task.created has revision ${event.revision}`);
  if (event.task_id !== op.task_id)
    emit('creation_event', `event ${event.event_id}`, 'task.created names another task');
  if (op.result_event_id !== null && op.result_event_id !== event.event_id) {
    emit('creation_event', `event ${event.event_id}`, `the operation's result event is ${op.result_event_id}`);
  }
  if (rec.task && rec.task.creation_state !== 'completed') {
    emit('task_state', `task ${op.task_id}`, `completed operation, task creation_state ${rec.task.creation_state}`);
  }
}

/** The step states an ended creation can hold (the same rules Complete and Abort apply). */
function checkEndedSteps(emit: Emit, rec: OperationRecord): void {
  const { op } = rec;
  if (op.state === 'completed') {
    for (const s of rec.steps) {
      const done =
        s.kind === 'launch_intent' ? s.state === 'armed' || s.state === 'cancelled' : s.state === 'succeeded';
      if (!done) emit('step_state', stepSubject(s), `step is ${s.state} in a completed creation`);
    }
    if (op.result_event_id === null) emit('creation_event', `operation ${op.id}`, 'completed without a result event');
  }
  if (op.state === 'aborted') {
    for (const s of rec.steps) {
      // Cancelled intents belong to workspace deletion's Abort, which may hold them.
      const blocker = s.state === 'cancelled' ? null : abortBlocker(s);
      if (blocker) emit('step_state', stepSubject(s), `aborted, but ${blocker}`);
    }
    if (rec.task) emit('task_state', `task ${op.task_id}`, 'aborted, but the task row is still there');
  }
}

function checkClaim(emit: Emit, rec: OperationRecord, claim: DispatchClaimRow): void {
  const subject = `dispatch ${claim.id}`;
  const { op } = rec;
  if (op.state !== 'completed') {
    emit('dispatch_claim', subject, `a dispatch claim for a ${op.state} operation`);
    return;
  }
  // The event that announces the launch: task.created for an immediate start, the later resolution for a deferred one.
  const announced = rec.events.find((e) => e.type === (op.start_policy === 'deferred' ? RESOLVED : 'task.created'));
  if (!announced) emit('launch_before_event', subject, `a dispatch claim with no ${op.start_policy} start's event`);
  else if (new Date(claim.created_at).getTime() < new Date(announced.created_at).getTime()) {
    emit(
      'launch_before_event',
      subject,
      `claimed at ${new Date(claim.created_at).toISOString()}, before ${announced.type} at ${new Date(announced.created_at).toISOString()}`,
    );
  }
  if (claim.task_id !== op.task_id) emit('dispatch_claim', subject, 'the claim names another task');
  if (claim.idempotency_key !== dispatchIdempotencyKey(op.id, claim.session_id)) {
    emit('dispatch_claim', subject, 'idempotency key is not task-launch/<operation>/<session>');
  }
  const intent = rec.steps.find((s) => s.kind === 'launch_intent' && s.step_key === claim.session_id);
  if (!intent) emit('dispatch_claim', subject, 'no launch intent for this session');
  else if (intent.request_sha256 !== claim.request_sha256) {
    emit('dispatch_claim', subject, "request_sha256 is not the launch intent's");
  }
  // The evidence names this claim, repeats its runtime handle, and hashes (its canonical text) to the stored hash.
  checkHashed(
    emit,
    'dispatch_claim',
    subject,
    'evidence',
    { json: claim.evidence_json, sha256: claim.evidence_sha256 },
    (value) => {
      const doc = value as Record<string, unknown>;
      if (
        doc.dispatch_id !== claim.id ||
        doc.idempotency_key !== claim.idempotency_key ||
        doc.request_sha256 !== claim.request_sha256
      ) {
        throw new Error('evidence names another dispatch');
      }
      if (claim.runtime_handle !== null && canonicalJson(doc.runtime_handle) !== claim.runtime_handle) {
        throw new Error('evidence does not repeat the runtime handle');
      }
      return domainHash(DISPATCH_EVIDENCE_DOMAIN, canonicalJson(doc));
    },
  );
}

export function checkOperation(rec: OperationRecord): Drift[] {
  const { op } = rec;
  const drift: Drift[] = [];
  const emit: Emit = (code, subject, message) =>
    drift.push({ code, operation_id: op.id, task_id: op.task_id, subject, message });
  let plan: CreationPlan | null = null;
  guard(emit, 'operation_binding', `operation ${op.id}`, () => {
    plan = verifyStoredBindings(op).plan;
  });
  if (plan) {
    const p: CreationPlan = plan;
    guard(emit, 'step_set', `operation ${op.id}`, () => verifyStepSet(rec.steps, p, op.state === 'completed'));
    const resolved = rec.events.find((e) => e.type === RESOLVED);
    if (rec.steps.length > p.steps.length && !resolved) {
      emit('step_set', `operation ${op.id}`, `a promoted session/launch pair without its ${RESOLVED} event`);
    }
    // A created task that awaits its blockers while all of them are done missed its resolution (MarkTaskDone or its
    // Complete's phase B writes it in the same transaction that clears the flag).
    const t = rec.task;
    if (op.state === 'completed' && t?.awaits_blockers) {
      if (resolved) emit('task_state', `task ${op.task_id}`, `${RESOLVED} is written, but the task still awaits`);
      else if (t.blockers.length > 0 && t.blockers.every((b) => b === 'done')) {
        emit(
          'task_state',
          `task ${op.task_id}`,
          `every blocker is done, but the task still awaits them (no ${RESOLVED})`,
        );
      }
    }
    // Delivery promotes before it marks the event: a live deferred task with a delivered event and no pair never starts.
    const promotable = op.state === 'completed' && promotedSteps(p).length > 0 && rec.task?.lifecycle_state === 'live';
    if (promotable && resolved?.delivered_at != null && rec.steps.length === p.steps.length) {
      emit('step_set', `operation ${op.id}`, `${RESOLVED} was delivered, but the deferred start was never promoted`);
    }
    // The dispatcher holds the event undelivered when the ledger refuses the promotion (a contradiction).
    if (promotable && resolved && resolved.delivered_at == null && Number(resolved.delivery_attempts) > 0) {
      if (rec.steps.length === p.steps.length) {
        emit(
          'step_set',
          `operation ${op.id}`,
          `${RESOLVED} is held undelivered after ${Number(resolved.delivery_attempts)} attempt(s): the ledger refused its deferred start's promotion`,
        );
      }
    }
  }
  for (const step of rec.steps) checkStep(emit, step, plan);
  checkEvents(emit, rec);
  checkEndedSteps(emit, rec);
  for (const claim of rec.claims) checkClaim(emit, rec, claim);
  checkReleases(emit, rec);
  for (const job of rec.cleanupJobs) {
    guard(emit, 'cleanup_proof', `cleanup job ${job.id}`, () => {
      if (cleanupProofHash(parseCanonical(job.proof_json)) !== job.proof_sha256) {
        throw new Error('proof does not hash to proof_sha256');
      }
    });
  }
  return drift;
}
