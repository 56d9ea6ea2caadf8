/**
 * Entity for `external_id_releases` (docs/schema.md). A recorded external-ID
 * release (tier 4): `running` while its holder is `preparing-release`, then
 * `completed`. Property names equal column names; the schema comes only from
 * migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';
import type { ReleaseState } from '../src/domain/vocab';

@Entity({ name: 'external_id_releases' })
export class ExternalIdRelease {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'uuid' })
  task_id!: string;

  @Column({ type: 'uuid' })
  creation_operation_id!: string;

  /** Byte-exact, case-sensitive, no-pad (COLLATE "C" / utf8mb4 no-pad binary). */
  @Column({ type: 'varchar', length: 255 })
  external_id!: string;

  /** The holder's creation state when the release was asked: `preparing` or `completed`. */
  @Column({ type: 'varchar', length: 24 })
  holder_state!: 'preparing' | 'completed';

  @Column({ type: 'varchar', length: 16 })
  state!: ReleaseState;

  @Column({ type: 'varchar', length: 200 })
  requested_by!: string;

  @Column({ type: 'timestamp' })
  requested_at!: Date;

  @Column({ type: 'timestamp' })
  updated_at!: Date;

  @Column({ type: 'timestamp', nullable: true })
  completed_at!: Date | null;
}
