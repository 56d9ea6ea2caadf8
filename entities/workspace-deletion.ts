/**
 * Entity for `workspace_deletions` (docs/schema.md). One workspace deletion
 * cascade (tier 4): `running` from the accepted request until its last batch,
 * then `completed`, with the counts of what it did. Property names equal
 * column names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';
import type { WorkspaceDeletionState } from '../src/domain/vocab';

@Entity({ name: 'workspace_deletions' })
export class WorkspaceDeletion {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'varchar', length: 16 })
  state!: WorkspaceDeletionState;

  @Column({ type: 'varchar', length: 200 })
  requested_by!: string;

  @Column({ type: 'int' })
  completed_creations!: number;

  @Column({ type: 'int' })
  aborted_creations!: number;

  @Column({ type: 'int' })
  deleted_tasks!: number;

  @Column({ type: 'int' })
  cancelled_launches!: number;

  @Column({ type: 'int' })
  transferred_launches!: number;

  @Column({ type: 'int' })
  cleanup_jobs!: number;

  /** Creations the last batch left for a later one (a step or compensation still in flight). */
  @Column({ type: 'int' })
  waiting_operations!: number;

  @Column({ type: 'int' })
  batches!: number;

  @Column({ type: 'timestamp' })
  requested_at!: Date;

  @Column({ type: 'timestamp' })
  updated_at!: Date;

  @Column({ type: 'timestamp', nullable: true })
  completed_at!: Date | null;
}
