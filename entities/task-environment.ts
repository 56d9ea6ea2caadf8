/**
 * Entity for `task_environments` (docs/schema.md). A task-private or shared execution
 * environment (tier 11). Property names equal column names; the schema comes only from
 * migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'task_environments' })
export class TaskEnvironment {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'uuid', nullable: true })
  task_id!: string | null;

  @Column({ type: 'varchar', length: 16 })
  kind!: 'task' | 'shared';

  @Column({ type: 'uuid', nullable: true })
  operation_id!: string | null;

  @Column({ type: 'varchar', length: 200, nullable: true })
  name!: string | null;

  @Column({ type: 'timestamp' })
  created_at!: Date;
}
