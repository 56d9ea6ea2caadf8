/**
 * Entity for `api_tokens` (docs/schema.md). A bearer token (stored as its SHA-256);
 * workspace_id NULL means an operator token for all workspaces. Property names equal
 * column names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'api_tokens' })
export class ApiToken {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid', nullable: true })
  workspace_id!: string | null;

  @Column({ type: 'varchar', length: 200 })
  principal_id!: string;

  @Column({ type: 'varchar', length: 16 })
  role!: 'operator' | 'member';

  @Column({ type: 'char', length: 64 })
  token_sha256!: string;

  @Column({ type: 'int' })
  revision!: number;

  @Column({ type: 'timestamp', nullable: true })
  revoked_at!: Date | null;

  @Column({ type: 'timestamp' })
  created_at!: Date;
}
