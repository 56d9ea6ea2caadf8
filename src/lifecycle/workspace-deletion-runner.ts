/**
 * Runs a workspace deletion's cascade (on the reaper queue: the job the
 * DELETE request enqueues, and every reaper sweep for deletions still
 * running, so losing Redis loses nothing): one pass over the workspace's
 * pending creations in ascending ID order, each in its own transaction
 * (store/workspace-deletion-batch.ts), then FinishWorkspaceDeletion when none
 * is left. A creation with a step in flight is passed over; a later pass
 * takes it once the reaper's recovery has settled it. Then the outbox is
 * woken for the `task.deleted` events and the cleanup worker for the jobs.
 * Each creation the pass ends (aborted, or completed and deleted) is
 * announced at once (`announceEnded`), so a request waiting for it answers
 * now rather than at its next poll. Idempotent: any number of runners may
 * run one deletion; each creation is handled once under the workspace's
 * exclusive lock.
 */
import type { Db } from '../db/tx';
import { failpoint } from '../failpoints';
import type { Logger } from '../log';
import { cascadeNextCreation, type CascadeOutcome } from '../store/workspace-deletion-batch';
import { finishWorkspaceDeletion } from '../store/workspace-deletion';
import { deletionJobBuilder } from './deletion-jobs';

export interface DeletionRunnerDeps {
  db: Db;
  dataDir: string;
  log: Logger;
  /** Wakes the workspace's outbox dispatcher (the task.deleted events); else the reaper's sweep does. */
  wakeOutbox?: (workspaceId: string) => Promise<void>;
  /** Runs a cleanup pass soon; else the periodic pass does. */
  wakeCleanup?: () => Promise<void>;
  /** Wakes requests waiting for a creation this pass ended (a wake-up: they re-read the ledger); else they poll. */
  announceEnded?: (operationId: string) => Promise<void>;
}

export interface DeletionPass {
  handled: Record<CascadeOutcome, number>;
  finished: boolean;
  /** Creations left for a later pass (a step or compensation still in flight). */
  pending: number;
}

/** Why 1000: one pass stays a bounded burst of short transactions; the next sweep continues. */
const MAX_PER_PASS = 1000;

export async function runWorkspaceDeletion(
  deps: DeletionRunnerDeps,
  deletionId: string,
  workspaceId: string,
  options: { maxCreations?: number } = {},
): Promise<DeletionPass> {
  const max = options.maxCreations ?? MAX_PER_PASS;
  const handled: Record<CascadeOutcome, number> = { deleted: 0, completed_and_deleted: 0, aborted: 0, waiting: 0 };
  const jobs = deletionJobBuilder(deps.dataDir);
  let after: string | null = null;
  let reachedEnd = false;
  for (let i = 0; i < max; i++) {
    const step = await cascadeNextCreation(deps.db, deletionId, { after, jobs });
    if (step === 'none') {
      reachedEnd = true;
      break;
    }
    handled[step.outcome]++;
    after = step.operationId;
    if (step.outcome === 'aborted' || step.outcome === 'completed_and_deleted') {
      await deps.announceEnded?.(step.operationId).catch((err: unknown) => {
        deps.log.warn({ err, operation_id: step.operationId }, 'could not announce the ended creation; waiters poll');
      });
    }
    await failpoint('workspace_deletion_between_creations', { deletionId, operationId: step.operationId });
  }
  if (reachedEnd) await failpoint('workspace_deletion_before_finish', { deletionId });
  const finish = reachedEnd ? await finishWorkspaceDeletion(deps.db, deletionId) : { finished: false, pending: -1 };
  const changed = handled.deleted + handled.completed_and_deleted + handled.aborted;
  if (changed > 0) {
    await deps.wakeOutbox?.(workspaceId).catch((err: unknown) => {
      deps.log.warn({ err, workspace_id: workspaceId }, 'could not wake the outbox; the sweep delivers the events');
    });
    await deps.wakeCleanup?.().catch((err: unknown) => {
      deps.log.warn({ err }, 'could not wake the cleanup worker; its periodic pass runs the jobs');
    });
  }
  if (handled.waiting > 0) {
    deps.log.info(
      { deletion_id: deletionId, waiting: handled.waiting },
      'workspace deletion waits for creations with a step in flight',
    );
  }
  return { handled, finished: finish.finished, pending: finish.pending };
}
