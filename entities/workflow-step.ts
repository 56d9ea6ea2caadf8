/**
 * Entity for `workflow_steps` (docs/schema.md). A column of a workflow, with its WIP
 * limit (0: unlimited) and auto-start flag (tier 2). Property names equal column
 * names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'workflow_steps' })
export class WorkflowStep {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid' })
  workflow_id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'varchar', length: 200 })
  name!: string;

  @Column({ type: 'int' })
  position!: number;

  @Column({ type: 'int' })
  wip_limit!: number;

  @Column({ type: 'boolean' })
  auto_start!: boolean;

  @Column({ type: 'timestamp' })
  created_at!: Date;
}
