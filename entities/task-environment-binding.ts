/**
 * Entity for `task_environment_bindings` (docs/schema.md). Which environment a task
 * runs in (tier 11). Property names equal column names; the schema comes only from
 * migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'task_environment_bindings' })
export class TaskEnvironmentBinding {
  @PrimaryColumn({ type: 'uuid' })
  task_id!: string;

  @Column({ type: 'uuid' })
  environment_id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'uuid' })
  operation_id!: string;

  @Column({ type: 'uuid' })
  step_id!: string;

  @Column({ type: 'timestamp' })
  created_at!: Date;
}
