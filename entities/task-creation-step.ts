/**
 * Entity for `task_creation_steps` (docs/schema.md). One planned side effect of a
 * creation: claim, evidence and compensation sub-state (tier 7). Property names equal
 * column names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';
import type { CompensationState, StepDisposition, StepKind, StepState } from '../src/domain/vocab';

@Entity({ name: 'task_creation_steps' })
export class TaskCreationStep {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid' })
  operation_id!: string;

  @Column({ type: 'uuid' })
  task_id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'varchar', length: 40 })
  kind!: StepKind;

  @Column({ type: 'varchar', length: 255 })
  step_key!: string;

  @Column({ type: 'text' })
  request_json!: string;

  @Column({ type: 'char', length: 64 })
  request_sha256!: string;

  @Column({ type: 'char', length: 64 })
  idempotency_key!: string;

  @Column({ type: 'varchar', length: 16 })
  state!: StepState;

  @Column({ type: 'int' })
  generation!: number;

  @Column({ type: 'int' })
  attempt!: number;

  @Column({ type: 'varchar', length: 200, nullable: true })
  lease_owner!: string | null;

  @Column({ type: 'timestamp', nullable: true })
  lease_expires_at!: Date | null;

  @Column({ type: 'timestamp', nullable: true })
  next_attempt_at!: Date | null;

  @Column({ type: 'text', nullable: true })
  evidence_json!: string | null;

  @Column({ type: 'char', length: 64, nullable: true })
  evidence_sha256!: string | null;

  @Column({ type: 'varchar', length: 1024, nullable: true })
  provider_handle!: string | null;

  @Column({ type: 'char', length: 64, nullable: true })
  ownership_marker!: string | null;

  @Column({ type: 'uuid', nullable: true })
  cleanup_job_id!: string | null;

  @Column({ type: 'varchar', length: 24 })
  disposition!: StepDisposition;

  @Column({ type: 'varchar', length: 16 })
  compensation_state!: CompensationState;

  @Column({ type: 'int' })
  compensation_generation!: number;

  @Column({ type: 'varchar', length: 200, nullable: true })
  compensation_lease_owner!: string | null;

  @Column({ type: 'timestamp', nullable: true })
  compensation_lease_expires_at!: Date | null;

  @Column({ type: 'text', nullable: true })
  compensation_evidence_json!: string | null;

  @Column({ type: 'char', length: 64, nullable: true })
  compensation_evidence_sha256!: string | null;

  @Column({ type: 'varchar', length: 64, nullable: true })
  error_code!: string | null;

  @Column({ type: 'text', nullable: true })
  error_json!: string | null;

  @Column({ type: 'timestamp' })
  created_at!: Date;

  @Column({ type: 'timestamp' })
  updated_at!: Date;
}
