/**
 * Entity for `workspace_groups` (docs/schema.md). A named group of tasks in a
 * workspace (tier 12). Property names equal column names; the schema comes only from
 * migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'workspace_groups' })
export class WorkspaceGroup {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'varchar', length: 200 })
  name!: string;

  @Column({ type: 'timestamp' })
  created_at!: Date;
}
