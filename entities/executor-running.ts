/**
 * Entity for `executors_running` (docs/schema.md). A running agent runtime started by
 * a launch dispatch claim (tier 10). Property names equal column names; the schema
 * comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'executors_running' })
export class ExecutorRunning {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid' })
  session_id!: string;

  @Column({ type: 'uuid' })
  task_id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'uuid' })
  dispatch_claim_id!: string;

  @Column({ type: 'text' })
  runtime_handle!: string;

  @Column({ type: 'int', nullable: true })
  pid!: number | null;

  @Column({ type: 'varchar', length: 16 })
  state!: 'starting' | 'running' | 'exited';

  @Column({ type: 'timestamp' })
  started_at!: Date;

  @Column({ type: 'timestamp' })
  updated_at!: Date;
}
