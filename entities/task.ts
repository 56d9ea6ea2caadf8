/**
 * Entity for `tasks` (docs/schema.md). The live task row (deleted by Abort; a deleted
 * task keeps it as a tombstone with `lifecycle_state = 'deleted'` and no external ID);
 * external_id is byte-exact and unique per workspace (tier 5). Property names equal
 * column names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';
import type { StartPolicy, TaskCreationState, TaskLifecycleState } from '../src/domain/vocab';

@Entity({ name: 'tasks' })
export class Task {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'uuid', nullable: true })
  workflow_id!: string | null;

  @Column({ type: 'uuid', nullable: true })
  workflow_step_id!: string | null;

  @Column({ type: 'uuid', nullable: true })
  parent_id!: string | null;

  @Column({ type: 'varchar', length: 500 })
  title!: string;

  /** Free text, not a canonical document. */
  @Column({ type: 'text', nullable: true })
  description!: string | null;

  @Column({ type: 'varchar', length: 16 })
  creation_state!: TaskCreationState;

  @Column({ type: 'varchar', length: 16 })
  lifecycle_state!: TaskLifecycleState;

  @Column({ type: 'int' })
  lifecycle_generation!: number;

  @Column({ type: 'varchar', length: 16 })
  start_policy!: StartPolicy;

  @Column({ type: 'boolean' })
  wip_admitted!: boolean;

  @Column({ type: 'uuid', nullable: true })
  queued_for_step_id!: string | null;

  /** Byte-exact, case-sensitive, no-pad (COLLATE "C" / utf8mb4 no-pad binary). */
  @Column({ type: 'varchar', length: 255, nullable: true })
  external_id!: string | null;

  @Column({ type: 'timestamp', nullable: true })
  external_id_settled_at!: Date | null;

  @Column({ type: 'uuid' })
  creation_operation_id!: string;

  @Column({ type: 'int' })
  revision!: number;

  @Column({ type: 'timestamp' })
  created_at!: Date;

  @Column({ type: 'timestamp' })
  updated_at!: Date;

  /** True while the task waits for a later transition of its blockers (set by Begin; cleared by its resolution). */
  @Column({ type: 'boolean' })
  awaits_blockers!: boolean;

  /** When the task joined its step's WIP queue (promotion takes the oldest first); null when not queued. */
  @Column({ type: 'timestamp', nullable: true })
  queued_at!: Date | null;

  /** When the task took a WIP slot (its launch was admitted); null when it holds none. */
  @Column({ type: 'timestamp', nullable: true })
  admitted_at!: Date | null;

  /** Set with `lifecycle_state = 'deleted'` (the row stays as the deleted task's tombstone). */
  @Column({ type: 'timestamp', nullable: true })
  deleted_at!: Date | null;

  /** The task deletion or workspace deletion that deleted it. */
  @Column({ type: 'uuid', nullable: true })
  deletion_operation_id!: string | null;
}
