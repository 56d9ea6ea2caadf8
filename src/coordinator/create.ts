/**
 * `createTask`: Begin, wake the fleet, and drive/wait up to `waitMs` for the
 * operation to end. A found outcome returns at once (nothing else runs for a
 * found task). When the deadline passes the creation keeps going in the fleet;
 * the caller gets `pending` (HTTP 202). Waiting never deletes or settles.
 */
import { readRows, type Db } from '../db/tx';
import { failpoint } from '../failpoints';
import type { Metrics } from '../metrics';
import { beginTaskCreation } from '../store/begin';
import { TASK_VIEW_COLUMNS, toTaskView } from '../store/task-view';
import type { Caller, TaskView } from '../store/types';
import type { CreateTaskFn, CreateTaskOptions, CreateTaskOutcome } from './create-task';
import type { CreationEvents } from './creation-events';
import { enqueuePlanned } from './enqueue';
import type { QueueSet } from './queues';

export const DEFAULT_WAIT_MS = 15_000;

export interface CreateDeps {
  db: Db;
  queues: QueueSet;
  dataDir: string;
  metrics: Metrics | null;
}

/** Why this schedule: everything that ends a creation announces it (Complete, the recovery actor, a workspace
 *  deletion's cascade; `creation-events.ts`), so the poll is only the fallback for a lost announcement. While
 *  this process is known to hear the announcements (`CreationEvents.listening`), the first poll waits 1 s and the
 *  next ones 2 s: under load a creation takes hundreds of milliseconds, and each poll is a read of its own that
 *  would only find it still running. Until then (the first requests of a process, a dropped subscriber
 *  connection) it starts at 250 ms and backs off to 1 s. */
const FIRST_POLL_MS = 250;
const MAX_POLL_MS = 1000;
const FIRST_POLL_LISTENING_MS = 1000;
const MAX_POLL_LISTENING_MS = 2000;

function nextPoll(ms: number, listening: boolean): number {
  return Math.min(listening ? MAX_POLL_LISTENING_MS : MAX_POLL_MS, ms * 2);
}

interface EndRead {
  state: string;
  abort_cause: string | null;
  result_outcome: string | null;
  /** The task as it is now (null once an abort deleted its row). */
  task: TaskView | null;
}

/** The operation's state and its task's view, in one read (one round trip per look). */
async function readEnd(db: Db, operationId: string): Promise<EndRead | null> {
  const cols = TASK_VIEW_COLUMNS.split(', ')
    .map((c) => `t.${c} AS t_${c}`)
    .join(', ');
  const rows = await readRows<Record<string, unknown>>(
    db,
    `SELECT o.state, o.abort_cause, o.result_outcome, ${cols}
       FROM task_creation_operations o LEFT JOIN tasks t ON t.id = o.task_id WHERE o.id = ?`,
    [operationId],
  );
  const row = rows[0];
  if (!row) return null;
  const task = Object.fromEntries(
    TASK_VIEW_COLUMNS.split(', ').map((c) => [c, row[`t_${c}`]]),
  ) as unknown as Parameters<typeof toTaskView>[0];
  return {
    state: row.state as string,
    abort_cause: (row.abort_cause as string | null) ?? null,
    result_outcome: (row.result_outcome as string | null) ?? null,
    task: row.t_id == null ? null : toTaskView(task),
  };
}

async function waitForEnd(db: Db, events: CreationEvents, operationId: string, deadline: number) {
  // Not awaited: until the subscription is up (first request of a process), the poll alone serves.
  if (deadline > Date.now()) void events.ready();
  let poll = events.listening ? FIRST_POLL_LISTENING_MS : FIRST_POLL_MS;
  // Right after Begin nothing has run yet: the first read waits for an announcement or the first poll.
  let read = deadline <= Date.now();
  for (;;) {
    // Registered before the read, so an announcement between the read and the wait is not missed.
    const ended = events.signal(operationId);
    if (read) {
      const op = await readEnd(db, operationId);
      if ((op && (op.state === 'completed' || op.state === 'aborted')) || Date.now() >= deadline) {
        ended.cancel();
        return op;
      }
    }
    read = true;
    let timer: NodeJS.Timeout | undefined;
    const slept = new Promise<void>((r) => {
      timer = setTimeout(r, Math.min(poll, Math.max(1, deadline - Date.now())));
    });
    await Promise.race([ended.promise, slept]);
    clearTimeout(timer);
    ended.cancel();
    poll = nextPoll(poll, events.listening);
  }
}

export function makeCreateTask(deps: CreateDeps): CreateTaskFn {
  return async (caller: Caller, body: unknown, options: CreateTaskOptions = {}): Promise<CreateTaskOutcome> => {
    const started = Date.now();
    const waitMs = options.waitMs ?? DEFAULT_WAIT_MS;
    const res = await beginTaskCreation(deps.db, caller, body, { dataDir: deps.dataDir });
    if (res.outcome !== 'Created') {
      deps.metrics?.creations.inc({ outcome: res.outcome });
      return {
        status: 'done',
        outcome: res.outcome,
        task: res.task,
        operationId: res.operationId,
        deduplicated: true,
        creationComplete: res.task.creation_complete,
        abortCause: null,
      };
    }
    // Begin has committed; no wake-up exists yet. A crash here is healed only by the reaper's ledger sweep.
    await failpoint('after_begin_commit_before_enqueue', {
      operationId: res.operationId,
      workspaceId: res.task.workspace_id,
    });
    // With what Begin knows of the operation: the worker's first transaction need not read it first (ADR 0020).
    await enqueuePlanned(deps.queues, res.operationId, res.steps, {
      workspaceId: res.task.workspace_id,
      taskId: res.task.id,
      externalId: res.task.external_id !== null,
    });
    const op = await waitForEnd(deps.db, deps.queues.creationEvents, res.operationId, started + waitMs);
    // The task as the last look saw it (Begin's view when no look was made, or the row is gone).
    const task = op?.task ?? res.task;
    if (op?.state === 'completed') {
      const outcome = op.result_outcome === 'CreatedIdentityLost' ? 'CreatedIdentityLost' : 'Created';
      deps.metrics?.creations.inc({ outcome });
      deps.metrics?.creationSeconds.observe((Date.now() - started) / 1000);
      return {
        status: 'done',
        outcome,
        task,
        operationId: res.operationId,
        deduplicated: false,
        creationComplete: true,
        abortCause: null,
      };
    }
    if (op?.state === 'aborted') {
      deps.metrics?.creations.inc({ outcome: 'aborted' });
      return {
        status: 'aborted',
        outcome: 'Created',
        task: res.task,
        operationId: res.operationId,
        deduplicated: false,
        creationComplete: false,
        abortCause: op.abort_cause,
      };
    }
    deps.metrics?.creations.inc({ outcome: 'pending' });
    return {
      status: 'pending',
      outcome: 'Created',
      task,
      operationId: res.operationId,
      deduplicated: false,
      creationComplete: false,
      abortCause: null,
    };
  };
}
