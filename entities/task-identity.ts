/**
 * Entity for `task_identities` (docs/schema.md). The retained identity of a task ID,
 * kept after Abort and deletion (tier 6). Property names equal column names; the
 * schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';
import type { IdentityState } from '../src/domain/vocab';

@Entity({ name: 'task_identities' })
export class TaskIdentity {
  @PrimaryColumn({ type: 'uuid' })
  task_id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'uuid' })
  operation_id!: string;

  @Column({ type: 'varchar', length: 16 })
  state!: IdentityState;

  @Column({ type: 'timestamp' })
  created_at!: Date;

  @Column({ type: 'timestamp' })
  updated_at!: Date;
}
