/**
 * Entity for `task_message_attachments` (docs/schema.md). An uploaded file, staged by
 * a principal until a creation step claims it for a task (tier 14). Property names
 * equal column names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';
import type { AttachmentOwnerKind } from '../src/domain/vocab';

@Entity({ name: 'task_message_attachments' })
export class TaskMessageAttachment {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'varchar', length: 16 })
  owner_kind!: AttachmentOwnerKind;

  @Column({ type: 'varchar', length: 200 })
  staging_owner_id!: string;

  @Column({ type: 'uuid', nullable: true })
  task_id!: string | null;

  @Column({ type: 'uuid', nullable: true })
  claimed_by_operation_id!: string | null;

  @Column({ type: 'uuid', nullable: true })
  claimed_by_step_id!: string | null;

  @Column({ type: 'char', length: 64 })
  content_sha256!: string;

  /** bigint arrives as a string on both drivers. */
  @Column({ type: 'bigint' })
  size!: string;

  @Column({ type: 'varchar', length: 1024 })
  storage_path!: string;

  @Column({ type: 'timestamp' })
  created_at!: Date;

  @Column({ type: 'timestamp' })
  updated_at!: Date;
}
