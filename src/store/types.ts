/**
 * Public value types of the ledger Store: the caller's actor, the private
 * creation handle, step claims, and the task view callers see.
 */
import type {
  ActorBindingDocument,
  LaunchIntentRequest,
  StepEvidence,
  StepFailure,
  StepRequest,
} from '../canonical/types';
import type { BeginOutcome, StepKind, StepState, TaskCreationState } from '../domain/vocab';
import type { OperationEventRow } from './outbox-mark';

/**
 * A caller with a proven identity. For `api_principal` the authority is an
 * `api_tokens` row (id + revision); `operator` and `internal_service` are
 * trusted in-process authorities with revision 0.
 */
export interface Principal {
  variant: 'api_principal' | 'operator' | 'internal_service';
  principal_id: string;
  authority_id: string;
  authority_revision: number;
  /** The only workspace this principal may use, or null for all (operators). */
  workspace_id: string | null;
}

/**
 * A caller whose bearer token is still to be read (ADR 0025): `lookup()` issues the read and resolves to the
 * Principal, or rejects (unknown or revoked token) with the error the surface answers. Begin issues it together
 * with its first reads, so the token and the request's references share one round trip, and reports nothing
 * before it settled.
 */
export interface PrincipalLookup {
  lookup(): Promise<Principal>;
  /** The token's SHA-256, when the caller presented one: Begin may know its principal already (ADR 0052). */
  readonly tokenSha256?: string;
}

/** Who asks Begin: a known Principal, or one whose token is read alongside Begin's first reads. */
export type Caller = Principal | PrincipalLookup;

/**
 * The private handle Begin returns for `Created` only. Never serialized, never
 * rebuilt from task fields: the caller keeps this value and passes it to
 * Complete or Abort.
 */
export interface CreationHandle {
  readonly operationId: string;
  readonly taskId: string;
  readonly workspaceId: string;
  readonly completionToken: string;
  readonly actorBindingHash: string;
  readonly manifestHash: string;
}

/**
 * Who is driving an operation: the caller's handle, or a worker/recovery actor
 * bound to the retained operation (no caller handle; the Store revalidates the
 * stored manifest and actor hashes instead of a completion token).
 */
export type OperationAuthority =
  | { kind: 'handle'; handle: CreationHandle }
  | {
      kind: 'operation';
      operationId: string;
      actor: string;
      /**
       * A recovery action's fence: the recovery claim it runs under (RecoverTaskCreation). The Store's guard then
       * requires that claim to be the operation's live one (same recovery generation and owner, lease not
       * expired): an action whose claim went stale — taken over, released, or expired — writes nothing.
       */
      recovery?: RecoveryFence;
    };

export interface RecoveryFence {
  generation: number;
  owner: string;
}

export interface StepClaim {
  readonly operationId: string;
  readonly stepId: string;
  readonly kind: StepKind;
  readonly stepKey: string;
  readonly generation: number;
  readonly owner: string;
  /**
   * The lease's expiry by the database clock. Null for a claim recorded in
   * the transaction that made it (a ledger batch): its lease is set and
   * cleared before any other transaction can see it, so it is not read back.
   */
  readonly leaseExpiresAt: Date | null;
  readonly request: StepRequest;
  readonly requestSha256: string;
  readonly idempotencyKey: string;
}

export interface CompensationClaim {
  readonly operationId: string;
  readonly stepId: string;
  readonly kind: StepKind;
  readonly stepKey: string;
  readonly compensationGeneration: number;
  readonly owner: string;
  readonly leaseExpiresAt: Date;
  readonly request: StepRequest;
  readonly requestSha256: string;
  readonly idempotencyKey: string;
  readonly evidence: StepEvidence | null;
}

export interface TaskView {
  id: string;
  workspace_id: string;
  title: string;
  description: string | null;
  external_id: string | null;
  creation_state: TaskCreationState;
  creation_complete: boolean;
  creation_operation_id: string;
  workflow_id: string | null;
  workflow_step_id: string | null;
  parent_id: string | null;
  start_policy: string;
  created_at: Date;
}

/** A step row Begin inserted (`planned`, generation 0): what its first wake-up names. */
export interface PlannedStep {
  id: string;
  kind: StepKind;
  step_key: string;
}

export interface BeginResult {
  task: TaskView;
  outcome: BeginOutcome;
  /** Non-null only for `Created`. */
  handle: CreationHandle | null;
  operationId: string;
  /** The step rows Begin inserted (`Created` only; empty otherwise), for the first wake-up. */
  steps: readonly PlannedStep[];
}

export interface CompleteResult {
  outcome: 'Created' | 'CreatedIdentityLost';
  /** The operation's workspace (whose outbox now holds the event). */
  workspaceId: string;
  eventId: string;
  revision: 1;
  replayed: boolean;
  /**
   * When this call's phase B committed the event: the operation's undelivered events with their armed intents,
   * read in phase B's COMMIT round trip, for the delivery pass that follows (it need not read them again).
   */
  events?: Promise<OperationEventRow[]>;
  /**
   * When this call's phase B also took the launch's dispatch claim for its claimant (ADR 0019): the claim, settled
   * with the COMMIT. The claimant starts the agent under it (launch/launch-worker.ts) after confirming it.
   */
  launch?: Promise<DispatchClaim>;
}

export interface StepRow {
  id: string;
  operation_id: string;
  task_id: string;
  workspace_id: string;
  kind: StepKind;
  step_key: string;
  request_json: string;
  request_sha256: string;
  idempotency_key: string;
  state: StepState;
  generation: number;
  attempt: number;
  lease_owner: string | null;
  lease_expires_at: Date | null;
  evidence_json: string | null;
  evidence_sha256: string | null;
  compensation_state: string;
  compensation_generation: number;
  compensation_lease_owner: string | null;
  compensation_lease_expires_at: Date | null;
  cleanup_job_id: string | null;
  disposition: string;
}

export type { ActorBindingDocument, StepEvidence, StepFailure };

/** A taken launch-dispatch claim (store/launch-dispatch.ts, store/launch-claim-in-complete.ts). */
export interface DispatchClaim {
  readonly dispatchId: string;
  readonly operationId: string;
  readonly taskId: string;
  readonly workspaceId: string;
  readonly sessionId: string;
  readonly generation: number;
  readonly owner: string;
  readonly idempotencyKey: string;
  readonly request: LaunchIntentRequest;
  readonly requestSha256: string;
  /** What to start, read in the claim's transaction (launch/launch-worker.ts checks it against the binding). */
  readonly spec: LaunchSpecRow;
  /** What the claim verified under its locks; the record compares it by value on the server (ADR 0029). */
  readonly verified?: ClaimVerified;
}

/**
 * The stored values a dispatch claim verified (the operation's bindings re-derived, the intent's request against the
 * plan and its evidence against its hash): the launch record's one round trip requires them unchanged, by value.
 */
export interface ClaimVerified {
  readonly manifestHash: string;
  readonly actorBindingHash: string;
  /** Every step row of the operation, in ascending order (the record locks them all, tier 7). */
  readonly stepIds: readonly string[];
  readonly intent: {
    readonly id: string;
    readonly generation: number;
    readonly requestSha256: string;
    readonly evidenceSha256: string;
  };
}

/** The agent profile's executor as it is now, the session's environment and the task's first worktree. */
export interface LaunchSpecRow {
  executor_json: string | null;
  environment_id: string | null;
  worktree_path: string | null;
}
