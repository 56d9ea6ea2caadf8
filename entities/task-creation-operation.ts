/**
 * Entity for `task_creation_operations` (docs/schema.md). One task creation operation:
 * plan, claim, recovery lease, external-ID release and result (tier 4). Property names
 * equal column names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';
import type { BeginOutcome, OperationState, RecoveryAction, StartPolicy } from '../src/domain/vocab';

@Entity({ name: 'task_creation_operations' })
export class TaskCreationOperation {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'uuid' })
  task_id!: string;

  @Column({ type: 'varchar', length: 24 })
  state!: OperationState;

  @Column({ type: 'text' })
  plan_json!: string;

  @Column({ type: 'char', length: 64 })
  manifest_hash!: string;

  @Column({ type: 'text' })
  actor_json!: string;

  @Column({ type: 'char', length: 64 })
  actor_binding_hash!: string;

  @Column({ type: 'char', length: 64 })
  completion_token_sha256!: string;

  @Column({ type: 'varchar', length: 16 })
  start_policy!: StartPolicy;

  @Column({ type: 'int' })
  generation!: number;

  @Column({ type: 'varchar', length: 200, nullable: true })
  lease_owner!: string | null;

  @Column({ type: 'timestamp', nullable: true })
  lease_expires_at!: Date | null;

  @Column({ type: 'varchar', length: 40, nullable: true })
  recovery_action!: RecoveryAction | null;

  @Column({ type: 'int' })
  recovery_generation!: number;

  @Column({ type: 'varchar', length: 200, nullable: true })
  recovery_owner!: string | null;

  @Column({ type: 'timestamp', nullable: true })
  recovery_lease_expires_at!: Date | null;

  @Column({ type: 'char', length: 64, nullable: true })
  recovery_actor_binding_hash!: string | null;

  @Column({ type: 'uuid', nullable: true })
  release_operation_id!: string | null;

  @Column({ type: 'int' })
  release_generation!: number;

  @Column({ type: 'boolean' })
  release_applied!: boolean;

  @Column({ type: 'varchar', length: 24, nullable: true })
  result_outcome!: BeginOutcome | null;

  @Column({ type: 'int', nullable: true })
  result_revision!: number | null;

  @Column({ type: 'uuid', nullable: true })
  result_event_id!: string | null;

  @Column({ type: 'varchar', length: 64, nullable: true })
  abort_cause!: string | null;

  @Column({ type: 'varchar', length: 64, nullable: true })
  error_code!: string | null;

  @Column({ type: 'text', nullable: true })
  error_json!: string | null;

  @Column({ type: 'timestamp' })
  created_at!: Date;

  @Column({ type: 'timestamp' })
  updated_at!: Date;

  @Column({ type: 'timestamp', nullable: true })
  completing_at!: Date | null;

  @Column({ type: 'timestamp', nullable: true })
  completed_at!: Date | null;

  @Column({ type: 'timestamp', nullable: true })
  aborted_at!: Date | null;
}
