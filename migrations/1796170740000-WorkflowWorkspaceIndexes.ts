/**
 * Migration 14 of the ledger schema (after StepLeaseIndex1796170680000):
 * indexes `ix_workflows_workspace_created (workspace_id, created_at, id)` on
 * `workflows` and `ix_workflow_steps_workspace (workspace_id, workflow_id,
 * position)` on `workflow_steps`.
 *
 * Why: a creation without a workflow step is placed on the first step of its
 * workspace's oldest workflow (`DEFAULT_PLACEMENT_SQL`,
 * src/store/begin-context.ts), read before every such Begin; and the workflow
 * view (src/api/workflow-view.ts) lists a workspace's workflows and steps.
 * Neither table had an index that starts with the workspace, so each of those
 * reads scanned every workspace's workflows or steps: a cost per creation
 * that grew with the number of workspaces. Each index holds what its readers
 * order by, so a workspace's rows come in order. down() drops both.
 */
import type { MigrationInterface, QueryRunner } from 'typeorm';
import { detectSqlDialect, ident } from '../src/db/migration-columns';

const INDEXES = [
  { table: 'workflows', name: 'ix_workflows_workspace_created', columns: ['workspace_id', 'created_at', 'id'] },
  {
    table: 'workflow_steps',
    name: 'ix_workflow_steps_workspace',
    columns: ['workspace_id', 'workflow_id', 'position'],
  },
];

export class WorkflowWorkspaceIndexes1796170740000 implements MigrationInterface {
  name = 'WorkflowWorkspaceIndexes1796170740000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    for (const { table, name, columns } of INDEXES) {
      await queryRunner.query(
        `CREATE INDEX ${ident(d, name)} ON ${ident(d, table)} (${columns.map((c) => ident(d, c)).join(', ')})`,
      );
    }
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    for (const { table, name } of [...INDEXES].reverse()) {
      await queryRunner.query(
        d === 'postgres' ? `DROP INDEX ${ident(d, name)}` : `DROP INDEX ${ident(d, name)} ON ${ident(d, table)}`,
      );
    }
  }
}
