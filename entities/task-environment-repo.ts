/**
 * Entity for `task_environment_repos` (docs/schema.md). A repository checked out in an
 * environment: worktree, branch, base commit (tier 11). Property names equal column
 * names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'task_environment_repos' })
export class TaskEnvironmentRepo {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid' })
  environment_id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'uuid' })
  repository_id!: string;

  @Column({ type: 'varchar', length: 1024, nullable: true })
  worktree_path!: string | null;

  @Column({ type: 'varchar', length: 255, nullable: true })
  branch!: string | null;

  @Column({ type: 'varchar', length: 64, nullable: true })
  base_commit!: string | null;

  @Column({ type: 'uuid', nullable: true })
  operation_id!: string | null;

  @Column({ type: 'uuid', nullable: true })
  step_id!: string | null;

  @Column({ type: 'timestamp' })
  created_at!: Date;
}
