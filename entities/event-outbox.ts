/**
 * Entity for `event_outbox` (docs/schema.md). One outbox event; seq is the delivery
 * order, at most one event per (task_id, revision) (tier 16). Property names equal
 * column names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';
import type { OutboxEventType } from '../src/domain/vocab';

@Entity({ name: 'event_outbox' })
export class EventOutbox {
  /** Auto-increment delivery order; bigint arrives as a string. */
  @PrimaryGeneratedColumn('increment', { type: 'bigint' })
  seq!: string;

  @Column({ type: 'uuid' })
  event_id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'uuid' })
  task_id!: string;

  @Column({ type: 'int' })
  revision!: number;

  @Column({ type: 'varchar', length: 40 })
  type!: OutboxEventType;

  @Column({ type: 'uuid' })
  operation_id!: string;

  @Column({ type: 'text' })
  payload_json!: string;

  @Column({ type: 'char', length: 64 })
  payload_sha256!: string;

  @Column({ type: 'timestamp' })
  created_at!: Date;

  @Column({ type: 'timestamp', nullable: true })
  delivered_at!: Date | null;

  @Column({ type: 'int' })
  delivery_attempts!: number;
}
