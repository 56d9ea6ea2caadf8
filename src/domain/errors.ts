/**
 * Typed errors. One base class with a stable string `code` from a closed union;
 * expected outcomes (Created, FoundUnsettled, ...) are return values, never
 * throws. HTTP mapping happens only in `src/api/`.
 */

export const ERROR_CODES = [
  /** Malformed input; `field` names the offending JSON path. Nothing was written. */
  'invalid_request',
  /** The external ID is malformed (control character, too long). Nothing was written. */
  'invalid_external_id',
  /** A stored or supplied canonical document fails its closed schema. */
  'invalid_document',
  /** The caller may not use this workspace (maps to 404 `task not created`). */
  'not_authorized',
  /** A referenced row (workspace, repository, attachment, ...) does not exist. */
  'not_found',
  /** The retained identity of the requested task ID already exists. */
  'task_identity_reused',
  /** Handle does not match the retained operation (token, manifest, actor binding). */
  'handle_mismatch',
  /** Claim is stale: generation, owner or lease does not match. Zero writes. */
  'stale_claim',
  /** The requested transition is not legal from the current state. Zero writes. */
  'creation_state_conflict',
  /** Evidence or request bytes do not match the retained hashes. Zero writes. */
  'evidence_mismatch',
  /** WIP / admission capacity refused the command. */
  'capacity_conflict',
  /** The task is deleted: no lifecycle command applies to it any more. Zero writes. */
  'task_deleted',
  /** The target workflow step belongs to another workflow than the task's. Zero writes. */
  'workflow_mismatch',
  /** The workspace is being deleted (or was): nothing new happens in it. Zero writes. */
  'workspace_deleting',
  /** An operator's resolution of a step disagrees with what the system observes now. Zero writes. */
  'observation_disagrees',
  /** A lock was requested out of global tier order (a programming error). */
  'lock_order_violation',
  /** The command kept hitting deadlocks or serialization failures. */
  'retry_exhausted',
  /**
   * The database could not be reached or kept dropping the connection before
   * COMMIT (src/db/connection-loss.ts): nothing was written; ask again later.
   */
  'database_unavailable',
  /**
   * The connection dropped while COMMIT was on the wire: the command may or
   * may not have taken effect. Ask again idempotently (the same external ID,
   * the same claim); the ledger answers with what is true.
   */
  'commit_outcome_unknown',
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

export class TaskLedgerError extends Error {
  readonly code: ErrorCode;
  readonly detail: Record<string, unknown>;

  constructor(code: ErrorCode, message: string, detail: Record<string, unknown> = {}, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TaskLedgerError';
    this.code = code;
    this.detail = detail;
  }
}

/** Bad input, naming the field (a JSON pointer such as `/repositories/0/repository_id`). */
export class ValidationError extends TaskLedgerError {
  readonly field: string;
  constructor(
    field: string,
    message: string,
    code: 'invalid_request' | 'invalid_external_id' | 'invalid_document' = 'invalid_request',
  ) {
    super(code, `${field || '/'}: ${message}`, { field });
    this.name = 'ValidationError';
    this.field = field;
  }
}

/** A compare-and-set or predicate did not hold; the Store wrote nothing. */
export class ConflictError extends TaskLedgerError {
  constructor(
    code:
      | 'stale_claim'
      | 'creation_state_conflict'
      | 'handle_mismatch'
      | 'evidence_mismatch'
      | 'capacity_conflict'
      | 'task_deleted'
      | 'workflow_mismatch'
      | 'workspace_deleting'
      | 'observation_disagrees',
    message: string,
    detail: Record<string, unknown> = {},
  ) {
    super(code, message, detail);
    this.name = 'ConflictError';
  }
}

export class LockOrderError extends TaskLedgerError {
  constructor(message: string, detail: Record<string, unknown> = {}) {
    super('lock_order_violation', message, detail);
    this.name = 'LockOrderError';
  }
}

export function isTaskLedgerError(err: unknown, code?: ErrorCode): err is TaskLedgerError {
  return err instanceof TaskLedgerError && (code === undefined || err.code === code);
}

/**
 * The codes of a database fault rather than a ledger answer: the connection was
 * lost (nothing written, or the outcome of a COMMIT unknown) or deadlocks kept
 * restarting the command. Asking again soon is the remedy; background passes
 * (the reaper) never treat one as an operation that needs an operator.
 */
const TRANSIENT_CODES: ReadonlySet<ErrorCode> = new Set([
  'database_unavailable',
  'commit_outcome_unknown',
  'retry_exhausted',
]);

export function isTransientError(err: unknown): boolean {
  return isTaskLedgerError(err) && TRANSIENT_CODES.has(err.code);
}
