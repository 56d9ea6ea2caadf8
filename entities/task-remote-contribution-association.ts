/**
 * Entity for `task_remote_contribution_associations` (docs/schema.md). A pull/merge
 * request claimed for a task, unique per provider contribution (tier 15). Property
 * names equal column names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'task_remote_contribution_associations' })
export class TaskRemoteContributionAssociation {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'varchar', length: 16 })
  provider!: string;

  @Column({ type: 'uuid' })
  connection_id!: string;

  @Column({ type: 'varchar', length: 16 })
  contribution_kind!: string;

  @Column({ type: 'varchar', length: 200 })
  contribution_id!: string;

  @Column({ type: 'uuid' })
  task_id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'uuid' })
  repository_id!: string;

  @Column({ type: 'uuid' })
  operation_id!: string;

  @Column({ type: 'uuid' })
  step_id!: string;

  @Column({ type: 'char', length: 64 })
  idempotency_key!: string;

  @Column({ type: 'char', length: 64 })
  ownership_marker!: string;

  @Column({ type: 'varchar', length: 1024, nullable: true })
  provider_handle!: string | null;

  @Column({ type: 'timestamp' })
  claimed_at!: Date;
}
