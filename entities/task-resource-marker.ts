/**
 * Entity for `task_resource_markers` (docs/schema.md). Ownership marker of an external
 * resource (worktree, branch, ...) a step created (tier 14). Property names equal
 * column names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'task_resource_markers' })
export class TaskResourceMarker {
  @PrimaryColumn({ type: 'varchar', length: 255 })
  resource_key!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'uuid' })
  task_id!: string;

  @Column({ type: 'uuid' })
  operation_id!: string;

  @Column({ type: 'uuid' })
  step_id!: string;

  @Column({ type: 'varchar', length: 40 })
  kind!: string;

  @Column({ type: 'char', length: 64 })
  marker_sha256!: string;

  @Column({ type: 'timestamp' })
  created_at!: Date;
}
