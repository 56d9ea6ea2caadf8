/**
 * Migration 1 of the ledger schema (no predecessor): setup and authority
 * tables of docs/schema.md — workspaces, api_tokens, repositories,
 * agent_profiles, provider_connections, workflows, workflow_steps,
 * workspace_groups. down() drops them all (dependents first).
 */
import type { MigrationInterface, QueryRunner } from 'typeorm';
import {
  type SqlDialect,
  type TableSpec,
  boolColumn,
  createTables,
  createdAtColumn,
  detectSqlDialect,
  docColumn,
  dropTables,
  hashColumn,
  ident,
  inCheck,
  intColumn,
  strColumn,
  tsColumn,
  updatedAtColumn,
  uuidColumn,
} from '../src/db/migration-columns';
import { PROVIDERS } from '../src/domain/vocab';

/** Closed sets of this migration that have no tuple in src/domain/vocab.ts. */
const WORKSPACE_STATES = ['active', 'deleting', 'deleted'] as const;
const API_TOKEN_ROLES = ['operator', 'member'] as const;
const EXECUTOR_KINDS = ['local'] as const;

function tables(d: SqlDialect): TableSpec[] {
  return [
    {
      name: 'workspaces',
      columns: [
        uuidColumn('id', d),
        strColumn('name', 200, d),
        strColumn('state', 16, d, { default: "'active'" }),
        createdAtColumn(d),
        updatedAtColumn(d),
      ],
      primaryKey: ['id'],
      checks: [inCheck(d, 'workspaces', 'state', WORKSPACE_STATES)],
    },
    {
      name: 'api_tokens',
      columns: [
        uuidColumn('id', d),
        // NULL: an operator token valid for every workspace.
        uuidColumn('workspace_id', d, { nullable: true }),
        strColumn('principal_id', 200, d),
        strColumn('role', 16, d),
        hashColumn('token_sha256', d),
        intColumn('revision', d, { default: 1 }),
        tsColumn('revoked_at', d, { nullable: true }),
        createdAtColumn(d),
      ],
      primaryKey: ['id'],
      uniques: [{ name: 'uq_api_tokens_token_sha256', columns: ['token_sha256'] }],
      checks: [inCheck(d, 'api_tokens', 'role', API_TOKEN_ROLES)],
    },
    {
      name: 'repositories',
      columns: [
        uuidColumn('id', d),
        uuidColumn('workspace_id', d),
        strColumn('name', 200, d),
        strColumn('path', 1024, d),
        strColumn('default_branch', 255, d),
        createdAtColumn(d),
      ],
      primaryKey: ['id'],
      uniques: [{ name: 'uq_repositories_workspace_name', columns: ['workspace_id', 'name'] }],
    },
    {
      name: 'agent_profiles',
      columns: [
        uuidColumn('id', d),
        uuidColumn('workspace_id', d),
        strColumn('name', 200, d),
        strColumn('executor_kind', 32, d),
        docColumn('executor_json', d),
        createdAtColumn(d),
      ],
      primaryKey: ['id'],
      checks: [inCheck(d, 'agent_profiles', 'executor_kind', EXECUTOR_KINDS)],
    },
    {
      name: 'provider_connections',
      columns: [
        uuidColumn('id', d),
        uuidColumn('workspace_id', d),
        strColumn('provider', 16, d),
        strColumn('base_url', 1024, d),
        strColumn('token', 1024, d),
        createdAtColumn(d),
      ],
      primaryKey: ['id'],
      checks: [inCheck(d, 'provider_connections', 'provider', PROVIDERS)],
    },
    {
      name: 'workflows',
      columns: [uuidColumn('id', d), uuidColumn('workspace_id', d), strColumn('name', 200, d), createdAtColumn(d)],
      primaryKey: ['id'],
    },
    {
      name: 'workflow_steps',
      columns: [
        uuidColumn('id', d),
        uuidColumn('workflow_id', d),
        uuidColumn('workspace_id', d),
        strColumn('name', 200, d),
        intColumn('position', d),
        intColumn('wip_limit', d, { default: 0 }),
        boolColumn('auto_start', d, { default: false }),
        createdAtColumn(d),
      ],
      primaryKey: ['id'],
      uniques: [{ name: 'uq_workflow_steps_workflow_position', columns: ['workflow_id', 'position'] }],
      checks: [{ name: 'chk_workflow_steps_wip_limit', expression: `${ident(d, 'wip_limit')} >= 0` }],
    },
    {
      name: 'workspace_groups',
      columns: [uuidColumn('id', d), uuidColumn('workspace_id', d), strColumn('name', 200, d), createdAtColumn(d)],
      primaryKey: ['id'],
    },
  ];
}

export class SetupAndAuthority1796169600000 implements MigrationInterface {
  name = 'SetupAndAuthority1796169600000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await createTables(queryRunner, d, tables(d));
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await dropTables(queryRunner, d, tables(d));
  }
}
