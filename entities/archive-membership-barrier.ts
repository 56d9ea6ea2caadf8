/**
 * Entity for `archive_membership_barriers` (docs/schema.md). A barrier an archive or
 * workspace deletion holds on a membership scope (tier 4). Property names equal column
 * names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'archive_membership_barriers' })
export class ArchiveMembershipBarrier {
  @PrimaryColumn({ type: 'uuid' })
  operation_id!: string;

  @PrimaryColumn({ type: 'uuid' })
  scope_workspace_id!: string;

  @Column({ type: 'varchar', length: 24 })
  kind!: 'archive' | 'workspace_deletion';

  @Column({ type: 'varchar', length: 16 })
  state!: 'active' | 'released';

  @Column({ type: 'timestamp' })
  created_at!: Date;

  @Column({ type: 'timestamp', nullable: true })
  released_at!: Date | null;
}
