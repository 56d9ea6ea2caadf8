/**
 * Migration 3 of the ledger schema (after CreationLedger1796169660000): the
 * live task rows of docs/schema.md — tasks (FK to workspaces, byte-exact
 * external ID), retained identities and revisions, and every row a creation
 * step owns (repositories, blockers, group members, environments, attachments,
 * sessions, running executors, remote contributions, resource markers).
 * down() drops them all (dependents first).
 */
import type { MigrationInterface, QueryRunner } from 'typeorm';
import {
  type SqlDialect,
  type TableSpec,
  bigintColumn,
  boolColumn,
  createTables,
  createdAtColumn,
  detectSqlDialect,
  docColumn,
  dropTables,
  exactColumn,
  hashColumn,
  inCheck,
  intColumn,
  strColumn,
  textColumn,
  tsColumn,
  updatedAtColumn,
  uuidColumn,
} from '../src/db/migration-columns';
import {
  ATTACHMENT_OWNER_KINDS,
  IDENTITY_STATES,
  START_POLICIES,
  TASK_CREATION_STATES,
  TASK_LIFECYCLE_STATES,
} from '../src/domain/vocab';

/** Closed sets of this migration that have no tuple in src/domain/vocab.ts. */
const REVISION_KINDS = ['created', 'deleted'] as const;
const GROUP_MEMBER_ROLES = ['member', 'lead'] as const;
const ENVIRONMENT_KINDS = ['task', 'shared'] as const;
const SESSION_STATES = ['prepared', 'starting', 'running', 'stopped'] as const;
const EXECUTOR_STATES = ['starting', 'running', 'exited'] as const;

function tasks(d: SqlDialect): TableSpec {
  return {
    name: 'tasks',
    columns: [
      uuidColumn('id', d),
      uuidColumn('workspace_id', d),
      uuidColumn('workflow_id', d, { nullable: true }),
      uuidColumn('workflow_step_id', d, { nullable: true }),
      uuidColumn('parent_id', d, { nullable: true }),
      strColumn('title', 500, d),
      textColumn('description', d, { nullable: true }),
      strColumn('creation_state', 16, d),
      strColumn('lifecycle_state', 16, d, { default: "'live'" }),
      intColumn('lifecycle_generation', d, { default: 1 }),
      strColumn('start_policy', 16, d),
      boolColumn('wip_admitted', d, { default: false }),
      uuidColumn('queued_for_step_id', d, { nullable: true }),
      // Byte-exact, case-sensitive and no-pad: 'a' and 'a ' are different IDs.
      exactColumn('external_id', d, { nullable: true }),
      tsColumn('external_id_settled_at', d, { nullable: true }),
      uuidColumn('creation_operation_id', d),
      intColumn('revision', d, { default: 0 }),
      createdAtColumn(d),
      updatedAtColumn(d),
    ],
    primaryKey: ['id'],
    uniques: [{ name: 'uq_tasks_workspace_external_id', columns: ['workspace_id', 'external_id'] }],
    checks: [
      inCheck(d, 'tasks', 'creation_state', TASK_CREATION_STATES),
      inCheck(d, 'tasks', 'lifecycle_state', TASK_LIFECYCLE_STATES),
      inCheck(d, 'tasks', 'start_policy', START_POLICIES),
    ],
    foreignKeys: [
      {
        name: 'fk_tasks_workspace',
        columns: ['workspace_id'],
        referencedTable: 'workspaces',
        referencedColumns: ['id'],
      },
    ],
  };
}

function identitiesAndRevisions(d: SqlDialect): TableSpec[] {
  return [
    {
      name: 'task_identities',
      columns: [
        uuidColumn('task_id', d),
        uuidColumn('workspace_id', d),
        uuidColumn('operation_id', d),
        strColumn('state', 16, d),
        createdAtColumn(d),
        updatedAtColumn(d),
      ],
      primaryKey: ['task_id'],
      checks: [inCheck(d, 'task_identities', 'state', IDENTITY_STATES)],
    },
    {
      name: 'task_revisions',
      columns: [
        uuidColumn('task_id', d),
        intColumn('revision', d),
        uuidColumn('workspace_id', d),
        strColumn('kind', 16, d),
        uuidColumn('operation_id', d),
        uuidColumn('event_id', d),
        createdAtColumn(d),
      ],
      primaryKey: ['task_id', 'revision'],
      checks: [inCheck(d, 'task_revisions', 'kind', REVISION_KINDS)],
    },
  ];
}

function membership(d: SqlDialect): TableSpec[] {
  return [
    {
      name: 'task_repositories',
      columns: [
        uuidColumn('task_id', d),
        uuidColumn('repository_id', d),
        uuidColumn('workspace_id', d),
        intColumn('position', d),
        strColumn('base_branch', 255, d),
        boolColumn('fresh_branch', d),
        createdAtColumn(d),
      ],
      primaryKey: ['task_id', 'repository_id'],
    },
    {
      name: 'task_blockers',
      columns: [
        uuidColumn('task_id', d),
        uuidColumn('blocker_task_id', d),
        uuidColumn('workspace_id', d),
        uuidColumn('operation_id', d),
        uuidColumn('step_id', d),
        createdAtColumn(d),
      ],
      primaryKey: ['task_id', 'blocker_task_id'],
    },
    {
      name: 'workspace_group_members',
      columns: [
        uuidColumn('group_id', d),
        uuidColumn('task_id', d),
        uuidColumn('workspace_id', d),
        strColumn('role', 16, d),
        uuidColumn('operation_id', d),
        uuidColumn('step_id', d),
        createdAtColumn(d),
      ],
      primaryKey: ['group_id', 'task_id'],
      checks: [inCheck(d, 'workspace_group_members', 'role', GROUP_MEMBER_ROLES)],
    },
  ];
}

function environments(d: SqlDialect): TableSpec[] {
  return [
    {
      name: 'task_environments',
      columns: [
        uuidColumn('id', d),
        uuidColumn('workspace_id', d),
        uuidColumn('task_id', d, { nullable: true }),
        strColumn('kind', 16, d),
        uuidColumn('operation_id', d, { nullable: true }),
        strColumn('name', 200, d, { nullable: true }),
        createdAtColumn(d),
      ],
      primaryKey: ['id'],
      checks: [inCheck(d, 'task_environments', 'kind', ENVIRONMENT_KINDS)],
    },
    {
      name: 'task_environment_bindings',
      columns: [
        uuidColumn('task_id', d),
        uuidColumn('environment_id', d),
        uuidColumn('workspace_id', d),
        uuidColumn('operation_id', d),
        uuidColumn('step_id', d),
        createdAtColumn(d),
      ],
      primaryKey: ['task_id'],
    },
    {
      name: 'task_environment_repos',
      columns: [
        uuidColumn('id', d),
        uuidColumn('environment_id', d),
        uuidColumn('workspace_id', d),
        uuidColumn('repository_id', d),
        strColumn('worktree_path', 1024, d, { nullable: true }),
        strColumn('branch', 255, d, { nullable: true }),
        strColumn('base_commit', 64, d, { nullable: true }),
        uuidColumn('operation_id', d, { nullable: true }),
        uuidColumn('step_id', d, { nullable: true }),
        createdAtColumn(d),
      ],
      primaryKey: ['id'],
      uniques: [
        { name: 'uq_task_environment_repos_environment_repository', columns: ['environment_id', 'repository_id'] },
      ],
    },
  ];
}

function effects(d: SqlDialect): TableSpec[] {
  return [
    {
      name: 'task_message_attachments',
      columns: [
        uuidColumn('id', d),
        uuidColumn('workspace_id', d),
        strColumn('owner_kind', 16, d),
        strColumn('staging_owner_id', 200, d),
        uuidColumn('task_id', d, { nullable: true }),
        uuidColumn('claimed_by_operation_id', d, { nullable: true }),
        uuidColumn('claimed_by_step_id', d, { nullable: true }),
        hashColumn('content_sha256', d),
        bigintColumn('size', d),
        strColumn('storage_path', 1024, d),
        createdAtColumn(d),
        updatedAtColumn(d),
      ],
      primaryKey: ['id'],
      checks: [inCheck(d, 'task_message_attachments', 'owner_kind', ATTACHMENT_OWNER_KINDS)],
    },
    {
      name: 'task_sessions',
      columns: [
        uuidColumn('id', d),
        uuidColumn('task_id', d),
        uuidColumn('workspace_id', d),
        uuidColumn('environment_id', d),
        strColumn('executor_id', 100, d),
        strColumn('executor_profile_id', 100, d),
        uuidColumn('agent_profile_id', d),
        hashColumn('launch_config_sha256', d),
        strColumn('state', 16, d),
        uuidColumn('operation_id', d),
        uuidColumn('step_id', d),
        createdAtColumn(d),
        updatedAtColumn(d),
      ],
      primaryKey: ['id'],
      checks: [inCheck(d, 'task_sessions', 'state', SESSION_STATES)],
    },
    {
      name: 'executors_running',
      columns: [
        uuidColumn('id', d),
        uuidColumn('session_id', d),
        uuidColumn('task_id', d),
        uuidColumn('workspace_id', d),
        uuidColumn('dispatch_claim_id', d),
        docColumn('runtime_handle', d),
        intColumn('pid', d, { nullable: true }),
        strColumn('state', 16, d),
        tsColumn('started_at', d),
        updatedAtColumn(d),
      ],
      primaryKey: ['id'],
      uniques: [{ name: 'uq_executors_running_session_id', columns: ['session_id'] }],
      checks: [inCheck(d, 'executors_running', 'state', EXECUTOR_STATES)],
    },
    {
      name: 'task_remote_contribution_associations',
      columns: [
        uuidColumn('id', d),
        strColumn('provider', 16, d),
        uuidColumn('connection_id', d),
        strColumn('contribution_kind', 16, d),
        strColumn('contribution_id', 200, d),
        uuidColumn('task_id', d),
        uuidColumn('workspace_id', d),
        uuidColumn('repository_id', d),
        uuidColumn('operation_id', d),
        uuidColumn('step_id', d),
        hashColumn('idempotency_key', d),
        hashColumn('ownership_marker', d),
        strColumn('provider_handle', 1024, d, { nullable: true }),
        tsColumn('claimed_at', d),
      ],
      primaryKey: ['id'],
      uniques: [
        {
          name: 'uq_remote_contribution',
          columns: ['provider', 'connection_id', 'contribution_kind', 'contribution_id'],
        },
      ],
    },
    {
      name: 'task_resource_markers',
      columns: [
        strColumn('resource_key', 255, d),
        uuidColumn('workspace_id', d),
        uuidColumn('task_id', d),
        uuidColumn('operation_id', d),
        uuidColumn('step_id', d),
        strColumn('kind', 40, d),
        hashColumn('marker_sha256', d),
        createdAtColumn(d),
      ],
      primaryKey: ['resource_key'],
    },
  ];
}

function tables(d: SqlDialect): TableSpec[] {
  return [tasks(d), ...identitiesAndRevisions(d), ...membership(d), ...environments(d), ...effects(d)];
}

export class LiveTaskRows1796169720000 implements MigrationInterface {
  name = 'LiveTaskRows1796169720000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await createTables(queryRunner, d, tables(d));
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await dropTables(queryRunner, d, tables(d));
  }
}
