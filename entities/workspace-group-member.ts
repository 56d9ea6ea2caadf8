/**
 * Entity for `workspace_group_members` (docs/schema.md). A task's membership of a
 * workspace group, written by a creation step (tier 12). Property names equal column
 * names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'workspace_group_members' })
export class WorkspaceGroupMember {
  @PrimaryColumn({ type: 'uuid' })
  group_id!: string;

  @PrimaryColumn({ type: 'uuid' })
  task_id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'varchar', length: 16 })
  role!: 'member' | 'lead';

  @Column({ type: 'uuid' })
  operation_id!: string;

  @Column({ type: 'uuid' })
  step_id!: string;

  @Column({ type: 'timestamp' })
  created_at!: Date;
}
