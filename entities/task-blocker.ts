/**
 * Entity for `task_blockers` (docs/schema.md). A blocking dependency of a task,
 * written by a creation step (tier 12). Property names equal column names; the schema
 * comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'task_blockers' })
export class TaskBlocker {
  @PrimaryColumn({ type: 'uuid' })
  task_id!: string;

  @PrimaryColumn({ type: 'uuid' })
  blocker_task_id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'uuid' })
  operation_id!: string;

  @Column({ type: 'uuid' })
  step_id!: string;

  @Column({ type: 'timestamp' })
  created_at!: Date;
}
