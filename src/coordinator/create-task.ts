/**
 * The create command every surface (REST, admission queue, demo) calls:
 * Begin, enqueue the runnable steps, then wait up to `waitMs` for the
 * operation to reach `completed` or `aborted`. The caller's error or
 * cancellation never deletes or settles anything: an unfinished creation is
 * left to the fleet and the reaper.
 */
import type { Caller, TaskView } from '../store/types';
import type { BeginOutcome } from '../domain/vocab';

export interface CreateTaskOutcome {
  /** `created`/`found`: the operation finished (or was found); `pending`: still preparing at the deadline; `aborted`: the creation aborted. */
  status: 'done' | 'pending' | 'aborted';
  outcome: BeginOutcome;
  task: TaskView;
  operationId: string;
  deduplicated: boolean;
  creationComplete: boolean;
  abortCause: string | null;
}

export interface CreateTaskOptions {
  /** How long the request drives the creation before answering 202 (default 15000). */
  waitMs?: number;
}

/** `caller`: a known Principal, or one whose token Begin reads with its first reads (ADR 0025). */
export type CreateTaskFn = (caller: Caller, body: unknown, options?: CreateTaskOptions) => Promise<CreateTaskOutcome>;
