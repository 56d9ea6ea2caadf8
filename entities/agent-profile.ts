/**
 * Entity for `agent_profiles` (docs/schema.md). An agent profile: which executor
 * starts the agent and its canonical configuration (tier 15). Property names equal
 * column names; the schema comes only from migrations/.
 */
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'agent_profiles' })
export class AgentProfile {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'uuid' })
  workspace_id!: string;

  @Column({ type: 'varchar', length: 200 })
  name!: string;

  @Column({ type: 'varchar', length: 32 })
  executor_kind!: 'local';

  @Column({ type: 'text' })
  executor_json!: string;

  @Column({ type: 'timestamp' })
  created_at!: Date;
}
