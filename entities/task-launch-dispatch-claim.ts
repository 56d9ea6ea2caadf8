/**
 * Entity for `task_launch_dispatch_claims` (docs/schema.md). The claim under which
 * LaunchTask starts a session's agent runtime (tier 8). Property names equal column
 * names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';
import type { DispatchState } from '../src/domain/vocab';

@Entity({ name: 'task_launch_dispatch_claims' })
export class TaskLaunchDispatchClaim {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid' })
  creation_operation_id!: string;

  @Column({ type: 'uuid' })
  task_id!: string;

  @Column({ type: 'uuid' })
  session_id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'varchar', length: 16 })
  state!: DispatchState;

  @Column({ type: 'int' })
  generation!: number;

  @Column({ type: 'varchar', length: 200, nullable: true })
  lease_owner!: string | null;

  @Column({ type: 'timestamp', nullable: true })
  lease_expires_at!: Date | null;

  @Column({ type: 'int' })
  lifecycle_generation!: number;

  @Column({ type: 'varchar', length: 255 })
  idempotency_key!: string;

  @Column({ type: 'char', length: 64 })
  request_sha256!: string;

  @Column({ type: 'text', nullable: true })
  runtime_handle!: string | null;

  @Column({ type: 'text', nullable: true })
  evidence_json!: string | null;

  @Column({ type: 'char', length: 64, nullable: true })
  evidence_sha256!: string | null;

  @Column({ type: 'uuid', nullable: true })
  deletion_operation_id!: string | null;

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
}
