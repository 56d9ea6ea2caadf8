/**
 * What `taskledger verify` reports: one `Drift` per stored fact that no
 * longer proves itself (a hash that does not re-derive, a ledger invariant
 * that does not hold, an effect the world no longer shows), and the run's
 * totals.
 */

export const DRIFT_CODES = [
  /** The plan or actor document does not re-derive ManifestHash / ActorBindingHash, or is bound elsewhere. */
  'operation_binding',
  /** Step rows and the plan's steps are not the same set. */
  'step_set',
  /** A step's request, request hash or idempotency key does not re-derive from the plan. */
  'step_request',
  /** A step's evidence is invalid or does not hash to `evidence_sha256`. */
  'step_evidence',
  /** A compensation proof is invalid or does not hash to `compensation_evidence_sha256`. */
  'compensation_proof',
  /** An outbox payload does not hash to `payload_sha256`. */
  'event_payload',
  /** A completed operation without exactly one `task.created` (revision one, its result event), or one where none may be. */
  'creation_event',
  /** The task row disagrees with its operation (a completed operation's task not `completed`; an aborted one's still there). */
  'task_state',
  /** A dispatch claim whose key, request hash or evidence does not re-derive, or that exists before Complete. */
  'dispatch_claim',
  /** A dispatch claim created before the operation's `task.created` event. */
  'launch_before_event',
  /** A cleanup job's proof does not hash to `proof_sha256`. */
  'cleanup_proof',
  /** A `task.created` event, dispatch claim or cleanup job whose creation operation is missing. */
  'orphan_row',
  /** Observation: a recorded effect of an unfinished creation is no longer exactly present. */
  'effect',
  /** A completed creation whose steps are not all done (non-launch `succeeded`, launch intent `armed`/`cancelled`). */
  'step_state',
  /** A step with a WIP limit holds more admitted tasks than its limit. */
  'wip_slots',
  /** A queued task that holds a slot, waits for another step, is deleted or has nothing to launch; or a lost promotion. */
  'wip_queue',
  /** More than one session, dispatch claim or runtime for one accepted create. */
  'launch_count',
  /** A deleted task without exactly one task.created and one task.deleted, or still holding its ID or a slot. */
  'task_deleted',
  /** A workspace deletion whose workspace, tasks, creations or launches are not in its state's shape. */
  'workspace_deletion',
  /**
   * An external-ID release and its creation disagree: `preparing-release` without its `running` release, a
   * `running` release its creation is not in, a `completed` release whose task still has an external ID, or
   * `release_applied` without a completed release of the preparing holder.
   */
  'external_id_release',
  /**
   * Attachment files (with observation): an aborted creation's attachment copies still on disk with no open
   * cleanup job, an attachment claim's marker left by an ended creation, or a staged upload whose file is missing.
   */
  'attachment_file',
] as const;

export type DriftCode = (typeof DRIFT_CODES)[number];

export interface Drift {
  code: DriftCode;
  operation_id: string;
  task_id: string;
  /** The row the finding is about, e.g. `step session_prepare/<key>` or `event <id>`. */
  subject: string;
  message: string;
}

export interface VerifyCounts {
  operations: number;
  steps: number;
  events: number;
  dispatch_claims: number;
  cleanup_jobs: number;
  /** Steps whose effect was re-observed (unfinished creations only). */
  observed: number;
  /** Of those, steps whose effect could not be observed (provider unreachable, I/O error). */
  unobserved: number;
}

export interface VerifyReport {
  counts: VerifyCounts;
  /** Every finding counted by code, the ones beyond `--max-drift` included. */
  drift_by_code: Partial<Record<DriftCode, number>>;
  drift: Drift[];
  /** Drift findings beyond `--max-drift` that were counted but not kept. */
  more: number;
  /** Effects that could not be observed (up to `--max-drift` of them): not drift, not proven either. */
  unobserved: Drift[];
}
