/**
 * What `buildApi` needs from its process: the database, configuration, a
 * logger, the create command (implemented by the coordinator, injected here),
 * optional BullMQ queues for the dashboard, the metrics registry, and the
 * outbox wake-up.
 */
import type { Queue } from 'bullmq';
import type { AppConfig } from '../app/config';
import type { QueueSet } from '../coordinator/queues';
import type { CreateTaskFn } from '../coordinator/create-task';
import type { Db } from '../db/tx';
import type { Logger } from '../log';
import type { Metrics } from '../metrics';
import type { OperatorResolveDeps } from '../runtime/operator-resolve';

export interface ApiDeps {
  db: Db;
  config: AppConfig;
  log: Logger;
  createTask: CreateTaskFn;
  /** BullMQ queues shown by Bull Board at `/admin/queues`; the dashboard is not mounted without them. */
  queues?: Queue[];
  metrics: Metrics;
  /**
   * Wakes the workspace's outbox dispatcher after a command wrote events (`POST /tasks/:id/done`); the fleet
   * passes `wakeOutbox` (coordinator/wake-outbox.ts). Without it, the reaper's next sweep delivers them.
   */
  wakeOutbox?: (workspaceId: string) => Promise<void>;
  /** Launches the agents of tasks a freed WIP slot admitted (coordinator/wake-launches.ts); else the sweep does. */
  wakeLaunches?: (taskIds: string[]) => Promise<void>;
  /** Runs a cleanup pass soon (a deletion handed effects to cleanup jobs); else the periodic pass does. */
  wakeCleanup?: () => Promise<void>;
  /**
   * What an operator's step resolution is checked against (runtime/operator-resolve.ts); default: the step kinds'
   * observers with this process's data directory and provider clients.
   */
  stepObserver?: OperatorResolveDeps;
  /**
   * Where a recovery run from the ledger view sends its wake-ups (`resume_preparing`, announcements after Complete or
   * Abort), as the reaper's do; without them the ledger is still updated and the next sweep wakes the workers.
   */
  recoveryQueues?: QueueSet;
  /** Enqueues a workspace deletion's cascade on the reaper queue; else the reaper's next sweep runs it. */
  startWorkspaceDeletion?: (deletionId: string, workspaceId: string) => Promise<void>;
}
