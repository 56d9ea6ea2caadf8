/**
 * Entity for `task_sessions` (docs/schema.md). A prepared agent session of a task
 * (tier 9). Property names equal column names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'task_sessions' })
export class TaskSession {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid' })
  task_id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'uuid' })
  environment_id!: string;

  @Column({ type: 'varchar', length: 100 })
  executor_id!: string;

  @Column({ type: 'varchar', length: 100 })
  executor_profile_id!: string;

  @Column({ type: 'uuid' })
  agent_profile_id!: string;

  @Column({ type: 'char', length: 64 })
  launch_config_sha256!: string;

  @Column({ type: 'varchar', length: 16 })
  state!: 'prepared' | 'starting' | 'running' | 'stopped';

  @Column({ type: 'uuid' })
  operation_id!: string;

  @Column({ type: 'uuid' })
  step_id!: string;

  @Column({ type: 'timestamp' })
  created_at!: Date;

  @Column({ type: 'timestamp' })
  updated_at!: Date;
}
