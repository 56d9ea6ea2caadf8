/**
 * Entity for `repositories` (docs/schema.md). A local Git repository registered in a
 * workspace (tier 15). Named GitRepository so it never shadows TypeORM's Repository.
 * Property names equal column names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'repositories' })
export class GitRepository {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'varchar', length: 200 })
  name!: string;

  @Column({ type: 'varchar', length: 1024 })
  path!: string;

  @Column({ type: 'varchar', length: 255 })
  default_branch!: string;

  @Column({ type: 'timestamp' })
  created_at!: Date;

  /** GitHub `owner/repo` or GitLab project path; NULL when the repository has no provider remote. */
  @Column({ type: 'varchar', length: 255, nullable: true })
  remote_slug!: string | null;
}
