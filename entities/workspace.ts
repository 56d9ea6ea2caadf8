/**
 * Entity for `workspaces` (docs/schema.md). A workspace: the unit of authority and of
 * the global lock order (tier 1). Property names equal column names; the schema comes
 * only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'workspaces' })
export class Workspace {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'varchar', length: 200 })
  name!: string;

  @Column({ type: 'varchar', length: 16 })
  state!: 'active' | 'deleting' | 'deleted';

  @Column({ type: 'timestamp' })
  created_at!: Date;

  @Column({ type: 'timestamp' })
  updated_at!: Date;
}
