/**
 * Entity for `task_revisions` (docs/schema.md). One retained revision of a task
 * (created, deleted) and the event that announced it (tier 6). Property names equal
 * column names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'task_revisions' })
export class TaskRevision {
  @PrimaryColumn({ type: 'uuid' })
  task_id!: string;

  @PrimaryColumn({ type: 'int' })
  revision!: number;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'varchar', length: 16 })
  kind!: 'created' | 'deleted';

  @Column({ type: 'uuid' })
  operation_id!: string;

  @Column({ type: 'uuid' })
  event_id!: string;

  @Column({ type: 'timestamp' })
  created_at!: Date;
}
