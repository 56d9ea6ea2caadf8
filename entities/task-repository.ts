/**
 * Entity for `task_repositories` (docs/schema.md). A repository a task works in, in
 * order (tier 5). Property names equal column names; the schema comes only from
 * migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'task_repositories' })
export class TaskRepository {
  @PrimaryColumn({ type: 'uuid' })
  task_id!: string;

  @PrimaryColumn({ type: 'uuid' })
  repository_id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'int' })
  position!: number;

  @Column({ type: 'varchar', length: 255 })
  base_branch!: string;

  @Column({ type: 'boolean' })
  fresh_branch!: boolean;

  @Column({ type: 'timestamp' })
  created_at!: Date;
}
