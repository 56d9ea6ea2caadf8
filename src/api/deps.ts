/**
 * What `buildApi` needs from its process: the database, configuration, a
 * logger, the create command (implemented by the coordinator, injected here),
 * optional BullMQ queues for the dashboard, and the metrics registry.
 */
import type { Queue } from 'bullmq';
import type { AppConfig } from '../app/config';
import type { CreateTaskFn } from '../coordinator/create-task';
import type { Db } from '../db/tx';
import type { Logger } from '../log';
import type { Metrics } from '../metrics';

export interface ApiDeps {
  db: Db;
  config: AppConfig;
  log: Logger;
  createTask: CreateTaskFn;
  /** BullMQ queues shown by Bull Board at `/admin/queues`; the dashboard is not mounted without them. */
  queues?: Queue[];
  metrics: Metrics;
}
