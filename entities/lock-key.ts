/**
 * Entity for `lock_keys` (docs/schema.md). A transaction-scoped key lock: insert the
 * key if missing, then SELECT ... FOR UPDATE it. Property names equal column names;
 * the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'lock_keys' })
export class LockKey {
  @PrimaryColumn({ type: 'char', length: 64 })
  key_hash!: string;

  @Column({ type: 'timestamp' })
  created_at!: Date;
}
