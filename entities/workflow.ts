/**
 * Entity for `workflows` (docs/schema.md). A workflow of a workspace (tier 2).
 * Property names equal column names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'workflows' })
export class Workflow {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'varchar', length: 200 })
  name!: string;

  @Column({ type: 'timestamp' })
  created_at!: Date;
}
