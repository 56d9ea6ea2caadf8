/**
 * Entity for `task_resource_cleanup_jobs` (docs/schema.md). A durable job that undoes
 * one effect a creation left behind (tier 8). Property names equal column names; the
 * schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';
import type { CleanupJobState, StepKind } from '../src/domain/vocab';

@Entity({ name: 'task_resource_cleanup_jobs' })
export class TaskResourceCleanupJob {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'uuid' })
  task_id!: string;

  @Column({ type: 'uuid' })
  operation_id!: string;

  @Column({ type: 'uuid', nullable: true })
  step_id!: string | null;

  @Column({ type: 'varchar', length: 40 })
  kind!: StepKind | 'launch_dispatch';

  @Column({ type: 'varchar', length: 64 })
  reason!: string;

  @Column({ type: 'text' })
  proof_json!: string;

  @Column({ type: 'char', length: 64 })
  proof_sha256!: string;

  @Column({ type: 'varchar', length: 16 })
  state!: CleanupJobState;

  @Column({ type: 'int' })
  generation!: number;

  @Column({ type: 'varchar', length: 200, nullable: true })
  lease_owner!: string | null;

  @Column({ type: 'timestamp', nullable: true })
  lease_expires_at!: Date | null;

  @Column({ type: 'timestamp', nullable: true })
  next_attempt_at!: Date | null;

  @Column({ type: 'int' })
  attempt!: number;

  @Column({ type: 'varchar', length: 64, nullable: true })
  error_code!: string | null;

  @Column({ type: 'text', nullable: true })
  error_json!: string | null;

  @Column({ type: 'timestamp' })
  created_at!: Date;

  @Column({ type: 'timestamp' })
  updated_at!: Date;

  @Column({ type: 'timestamp', nullable: true })
  finished_at!: Date | null;
}
