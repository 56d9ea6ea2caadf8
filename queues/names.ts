/**
 * BullMQ queue names, job payloads and job-ID builders. Jobs carry IDs only:
 * every worker re-reads and claims from the database (Redis holds wake-ups,
 * never truth). Job IDs derive from the row and its generation, so a
 * duplicate enqueue of the same wake-up collapses into one job.
 */
import { STEP_KINDS, type StepKind } from '../src/domain/vocab';

export const DEFAULT_QUEUE_PREFIX = 'taskledger';

export const stepQueueName = (kind: StepKind): string => `step-${kind}`;
export const STEP_QUEUE_NAMES = STEP_KINDS.map(stepQueueName);
export const COMPLETE_QUEUE = 'complete';
export const OUTBOX_QUEUE = 'outbox';
export const LAUNCH_QUEUE = 'launch';
export const CLEANUP_QUEUE = 'cleanup';
export const ADMISSION_QUEUE = 'admission';
export const REAPER_QUEUE = 'reaper';

export const ALL_QUEUE_NAMES = [
  ADMISSION_QUEUE,
  ...STEP_QUEUE_NAMES,
  COMPLETE_QUEUE,
  OUTBOX_QUEUE,
  LAUNCH_QUEUE,
  CLEANUP_QUEUE,
  REAPER_QUEUE,
] as const;

export interface StepJob {
  operationId: string;
  stepId: string;
  kind: StepKind;
  stepKey: string;
  /**
   * The step's generation when the wake-up was sent (it makes the job ID, so
   * one wake-up per generation). The claim decides, not the job: a job for a
   * step that is running, finished or failed does nothing; an older job for a
   * step back in `retry_wait` may run that retry before its backoff ends,
   * which is harmless (same idempotency key, a new claim generation).
   */
  generation: number;
  /** What the sender knew of the operation (the first wake-ups, from Begin's own result): a hint (ADR 0020). */
  hint?: OperationHint;
}
/**
 * The operation's workspace and task, and whether the task has an external ID, as the process that ran Begin knew
 * them. A worker's first transaction takes its first locks by it instead of reading them first; the guard checks it
 * against the operation and task rows under their locks and restarts with a read when they differ (ADR 0020).
 */
export interface OperationHint {
  workspaceId: string;
  taskId: string;
  externalId: boolean;
}
export interface CompleteJob {
  operationId: string;
}
export interface OutboxJob {
  workspaceId: string;
  /** Only this creation's events (the pass right after its own Complete); absent: the workspace's whole backlog. */
  operationId?: string;
}
export interface LaunchJob {
  operationId: string;
  taskId: string;
  sessionId: string;
}
/** A workspace deletion's cascade (on the reaper queue, beside its `sweep` jobs). */
export interface WorkspaceDeletionJob {
  deletionId: string;
  workspaceId: string;
}
export const WORKSPACE_DELETION_JOB = 'workspace-deletion';
export const workspaceDeletionJobId = (deletionId: string): string => `wsdel-${deletionId}-${Date.now()}`;
export interface AdmissionJob {
  /** Principal the producer authenticated as (token ID); re-checked by Begin. */
  tokenId: string;
  /** The create request, exactly the body of `POST /api/v1/tasks`. */
  body: unknown;
  /** How long the worker waits for the creation to end before completing the job (0..120000, default 0). */
  waitMs?: number;
}

// BullMQ custom job IDs may not contain ':'.
export const stepJobId = (stepId: string, generation: number): string => `step-${stepId}-g${generation}`;
export const completeJobId = (operationId: string): string => `complete-${operationId}`;
export const launchJobId = (operationId: string, sessionId: string): string => `launch-${operationId}-${sessionId}`;
