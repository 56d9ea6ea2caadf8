/**
 * Entity for `provider_connections` (docs/schema.md). A GitHub/GitLab connection of a
 * workspace (tier 15). Property names equal column names; the schema comes only from
 * migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';
import type { Provider } from '../src/domain/vocab';

@Entity({ name: 'provider_connections' })
export class ProviderConnection {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'varchar', length: 16 })
  provider!: Provider;

  @Column({ type: 'varchar', length: 1024 })
  base_url!: string;

  @Column({ type: 'varchar', length: 1024 })
  token!: string;

  @Column({ type: 'timestamp' })
  created_at!: Date;
}
