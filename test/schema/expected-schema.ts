/**
 * docs/schema.md transcribed independently of migrations/, as the expectation
 * the schema tests check the migrated databases against.
 *
 * Column notation: `name:type` with type one of uuid, hash, ts, doc, text,
 * exact, bool, int, bigint, serial, strN; a `?` suffix marks NULL; `=value`
 * a default (`=now` for the database clock). `in` lists each closed value set.
 */
import {
  ATTACHMENT_OWNER_KINDS,
  BEGIN_OUTCOMES,
  CLEANUP_JOB_STATES,
  COMPENSATION_STATES,
  DISPATCH_STATES,
  IDENTITY_STATES,
  OPERATION_STATES,
  OUTBOX_EVENT_TYPES,
  PROVIDERS,
  RECOVERY_ACTIONS,
  RELEASE_STATES,
  START_POLICIES,
  STEP_DISPOSITIONS,
  STEP_KINDS,
  STEP_STATES,
  TASK_CREATION_STATES,
  TASK_LIFECYCLE_STATES,
  WORKSPACE_DELETION_STATES,
} from '../../src/domain/vocab';
import { dbConfigFromEnv } from '../../src/db/config';

/** The steps' state indexes: partial on PostgreSQL (rows in flight or in trouble), plain on MySQL (migration 13). */
const STEP_STATE_INDEXES: Record<string, string[]> =
  dbConfigFromEnv().dialect === 'postgres'
    ? {
        ix_task_creation_steps_running_lease: ['lease_expires_at'],
        ix_task_creation_steps_open_compensation: ['compensation_state'],
      }
    : {
        ix_task_creation_steps_state_lease_expires_at: ['state', 'lease_expires_at'],
        ix_task_creation_steps_compensation_state: ['compensation_state'],
      };

export type LogicalType =
  'uuid' | 'hash' | 'ts' | 'doc' | 'text' | 'exact' | 'bool' | 'int' | 'bigint' | 'serial' | { str: number };

export interface ExpectedColumn {
  name: string;
  type: LogicalType;
  nullable: boolean;
  /** Raw default from the notation (`now`, `0`, `false`, `active`), if any. */
  default?: string;
}

export interface ExpectedTable {
  name: string;
  columns: ExpectedColumn[];
  primaryKey: string[];
  uniques: Record<string, string[]>;
  indexes: Record<string, string[]>;
  foreignKeys: Record<string, { columns: string[]; table: string }>;
  /** Closed value sets: column -> allowed values (CHECK `chk_<table>_<column>`). */
  in: Record<string, readonly string[]>;
  /** Other named CHECK constraints. */
  extraChecks: string[];
}

interface Extras {
  pk?: string[];
  uniques?: Record<string, string[]>;
  indexes?: Record<string, string[]>;
  fks?: Record<string, { columns: string[]; table: string }>;
  in?: Record<string, readonly string[]>;
  extraChecks?: string[];
}

function parseType(raw: string): LogicalType {
  const m = /^str(\d+)$/.exec(raw);
  if (m) return { str: Number(m[1]) };
  if (['uuid', 'hash', 'ts', 'doc', 'text', 'exact', 'bool', 'int', 'bigint', 'serial'].includes(raw)) {
    return raw as LogicalType;
  }
  throw new Error(`unknown logical type ${raw}`);
}

function t(name: string, columns: string, extras: Extras = {}): ExpectedTable {
  const cols = columns
    .trim()
    .split(/\s+/)
    .map((spec): ExpectedColumn => {
      const m = /^([a-z0-9_]+):([a-z0-9]+)(\?)?(?:=(.+))?$/.exec(spec);
      if (!m) throw new Error(`bad column spec ${spec}`);
      return { name: m[1]!, type: parseType(m[2]!), nullable: m[3] === '?', default: m[4] };
    });
  return {
    name,
    columns: cols,
    primaryKey: extras.pk ?? ['id'],
    uniques: extras.uniques ?? {},
    indexes: extras.indexes ?? {},
    foreignKeys: extras.fks ?? {},
    in: extras.in ?? {},
    extraChecks: extras.extraChecks ?? [],
  };
}

const CREATED = 'created_at:ts=now';
const STAMPS = 'created_at:ts=now updated_at:ts=now';

export const EXPECTED_TABLES: ExpectedTable[] = [
  // Setup and authority
  t('workspaces', `id:uuid name:str200 state:str16=active ${STAMPS}`, {
    in: { state: ['active', 'deleting', 'deleted'] },
  }),
  t(
    'api_tokens',
    `id:uuid workspace_id:uuid? principal_id:str200 role:str16 token_sha256:hash revision:int=1 revoked_at:ts? ${CREATED}`,
    { uniques: { uq_api_tokens_token_sha256: ['token_sha256'] }, in: { role: ['operator', 'member'] } },
  ),
  t(
    'repositories',
    `id:uuid workspace_id:uuid name:str200 path:str1024 default_branch:str255 ${CREATED} remote_slug:str255?`,
    {
      uniques: { uq_repositories_workspace_name: ['workspace_id', 'name'] },
    },
  ),
  t('agent_profiles', `id:uuid workspace_id:uuid name:str200 executor_kind:str32 executor_json:doc ${CREATED}`, {
    in: { executor_kind: ['local'] },
  }),
  t('provider_connections', `id:uuid workspace_id:uuid provider:str16 base_url:str1024 token:str1024 ${CREATED}`, {
    in: { provider: PROVIDERS },
  }),
  t('workflows', `id:uuid workspace_id:uuid name:str200 ${CREATED}`, {
    indexes: { ix_workflows_workspace_created: ['workspace_id', 'created_at', 'id'] },
  }),
  t(
    'workflow_steps',
    `id:uuid workflow_id:uuid workspace_id:uuid name:str200 position:int wip_limit:int=0 auto_start:bool=false ${CREATED}`,
    {
      uniques: { uq_workflow_steps_workflow_position: ['workflow_id', 'position'] },
      indexes: { ix_workflow_steps_workspace: ['workspace_id', 'workflow_id', 'position'] },
      extraChecks: ['chk_workflow_steps_wip_limit'],
    },
  ),
  t('workspace_groups', `id:uuid workspace_id:uuid name:str200 ${CREATED}`),

  // Creation ledger
  t(
    'task_creation_operations',
    `id:uuid workspace_id:uuid task_id:uuid state:str24 plan_json:doc manifest_hash:hash actor_json:doc
     actor_binding_hash:hash completion_token_sha256:hash start_policy:str16 generation:int=0 lease_owner:str200?
     lease_expires_at:ts? recovery_action:str40? recovery_generation:int=0 recovery_owner:str200?
     recovery_lease_expires_at:ts? recovery_actor_binding_hash:hash? release_operation_id:uuid?
     release_generation:int=0 release_applied:bool=false result_outcome:str24? result_revision:int?
     result_event_id:uuid? abort_cause:str64? error_code:str64? error_json:doc? ${STAMPS}
     completing_at:ts? completed_at:ts? aborted_at:ts?`,
    {
      indexes: {
        ix_task_creation_operations_state_updated_at: ['state', 'updated_at'],
        ix_task_creation_operations_workspace_created_at: ['workspace_id', 'created_at'],
        ix_task_creation_operations_task_id: ['task_id'],
      },
      in: {
        state: OPERATION_STATES,
        start_policy: START_POLICIES,
        recovery_action: RECOVERY_ACTIONS,
        result_outcome: BEGIN_OUTCOMES,
      },
    },
  ),
  t(
    'task_creation_steps',
    `id:uuid operation_id:uuid task_id:uuid workspace_id:uuid kind:str40 step_key:str255 request_json:doc
     request_sha256:hash idempotency_key:hash state:str16 generation:int=0 attempt:int=0 lease_owner:str200?
     lease_expires_at:ts? next_attempt_at:ts? evidence_json:doc? evidence_sha256:hash? provider_handle:str1024?
     ownership_marker:hash? cleanup_job_id:uuid? disposition:str24=none compensation_state:str16=none
     compensation_generation:int=0 compensation_lease_owner:str200? compensation_lease_expires_at:ts?
     compensation_evidence_json:doc? compensation_evidence_sha256:hash? error_code:str64? error_json:doc? ${STAMPS}`,
    {
      uniques: { uq_task_creation_steps_key: ['operation_id', 'kind', 'step_key'] },
      indexes: {
        ...STEP_STATE_INDEXES,
      },
      fks: { fk_task_creation_steps_operation: { columns: ['operation_id'], table: 'task_creation_operations' } },
      in: {
        kind: STEP_KINDS,
        state: STEP_STATES,
        disposition: STEP_DISPOSITIONS,
        compensation_state: COMPENSATION_STATES,
      },
      extraChecks: ['chk_task_creation_steps_launch_only_states', 'chk_task_creation_steps_cancelled_disposition'],
    },
  ),
  t('lock_keys', `key_hash:hash ${CREATED}`, { pk: ['key_hash'] }),

  // Live task rows
  t(
    'tasks',
    `id:uuid workspace_id:uuid workflow_id:uuid? workflow_step_id:uuid? parent_id:uuid? title:str500 description:text?
     creation_state:str16 lifecycle_state:str16=live lifecycle_generation:int=1 start_policy:str16
     wip_admitted:bool=false queued_for_step_id:uuid? external_id:exact? external_id_settled_at:ts?
     creation_operation_id:uuid revision:int=0 ${STAMPS} awaits_blockers:bool=false
     queued_at:ts? admitted_at:ts? deleted_at:ts? deletion_operation_id:uuid?`,
    {
      uniques: { uq_tasks_workspace_external_id: ['workspace_id', 'external_id'] },
      indexes: {
        ix_tasks_workflow_step_admitted: ['workflow_step_id', 'wip_admitted'],
        ix_tasks_queue: ['queued_for_step_id', 'queued_at'],
        ix_tasks_admitted_at: ['admitted_at'],
      },
      fks: { fk_tasks_workspace: { columns: ['workspace_id'], table: 'workspaces' } },
      in: {
        creation_state: TASK_CREATION_STATES,
        lifecycle_state: TASK_LIFECYCLE_STATES,
        start_policy: START_POLICIES,
      },
    },
  ),
  t('task_identities', `task_id:uuid workspace_id:uuid operation_id:uuid state:str16 ${STAMPS}`, {
    pk: ['task_id'],
    in: { state: IDENTITY_STATES },
  }),
  t(
    'task_revisions',
    `task_id:uuid revision:int workspace_id:uuid kind:str16 operation_id:uuid event_id:uuid ${CREATED}`,
    { pk: ['task_id', 'revision'], in: { kind: ['created', 'deleted'] } },
  ),
  t(
    'task_repositories',
    `task_id:uuid repository_id:uuid workspace_id:uuid position:int base_branch:str255 fresh_branch:bool ${CREATED}`,
    { pk: ['task_id', 'repository_id'] },
  ),
  t('task_blockers', `task_id:uuid blocker_task_id:uuid workspace_id:uuid operation_id:uuid step_id:uuid ${CREATED}`, {
    pk: ['task_id', 'blocker_task_id'],
    indexes: { ix_task_blockers_blocker_task_id: ['blocker_task_id'] },
  }),
  t(
    'workspace_group_members',
    `group_id:uuid task_id:uuid workspace_id:uuid role:str16 operation_id:uuid step_id:uuid ${CREATED}`,
    { pk: ['group_id', 'task_id'], in: { role: ['member', 'lead'] } },
  ),
  t(
    'task_environments',
    `id:uuid workspace_id:uuid task_id:uuid? kind:str16 operation_id:uuid? name:str200? ${CREATED}`,
    { in: { kind: ['task', 'shared'] }, indexes: { ix_task_environments_task_id: ['task_id'] } },
  ),
  t(
    'task_environment_bindings',
    `task_id:uuid environment_id:uuid workspace_id:uuid operation_id:uuid step_id:uuid ${CREATED}`,
    { pk: ['task_id'] },
  ),
  t(
    'task_environment_repos',
    `id:uuid environment_id:uuid workspace_id:uuid repository_id:uuid worktree_path:str1024? branch:str255?
     base_commit:str64? operation_id:uuid? step_id:uuid? ${CREATED}`,
    { uniques: { uq_task_environment_repos_environment_repository: ['environment_id', 'repository_id'] } },
  ),
  t(
    'task_message_attachments',
    `id:uuid workspace_id:uuid owner_kind:str16 staging_owner_id:str200 task_id:uuid? claimed_by_operation_id:uuid?
     claimed_by_step_id:uuid? content_sha256:hash size:bigint storage_path:str1024 ${STAMPS}`,
    {
      in: { owner_kind: ATTACHMENT_OWNER_KINDS },
      indexes: { ix_task_message_attachments_owner_kind_updated_at: ['owner_kind', 'updated_at'] },
    },
  ),
  t(
    'task_sessions',
    `id:uuid task_id:uuid workspace_id:uuid environment_id:uuid executor_id:str100 executor_profile_id:str100
     agent_profile_id:uuid launch_config_sha256:hash state:str16 operation_id:uuid step_id:uuid ${STAMPS}`,
    { in: { state: ['prepared', 'starting', 'running', 'stopped'] } },
  ),
  t(
    'executors_running',
    `id:uuid session_id:uuid task_id:uuid workspace_id:uuid dispatch_claim_id:uuid runtime_handle:doc pid:int?
     state:str16 started_at:ts updated_at:ts=now`,
    { uniques: { uq_executors_running_session_id: ['session_id'] }, in: { state: ['starting', 'running', 'exited'] } },
  ),
  t(
    'task_remote_contribution_associations',
    `id:uuid provider:str16 connection_id:uuid contribution_kind:str16 contribution_id:str200 task_id:uuid
     workspace_id:uuid repository_id:uuid operation_id:uuid step_id:uuid idempotency_key:hash ownership_marker:hash
     provider_handle:str1024? claimed_at:ts`,
    { uniques: { uq_remote_contribution: ['provider', 'connection_id', 'contribution_kind', 'contribution_id'] } },
  ),
  t(
    'task_resource_markers',
    `resource_key:str255 workspace_id:uuid task_id:uuid operation_id:uuid step_id:uuid kind:str40 marker_sha256:hash
     ${CREATED}`,
    { pk: ['resource_key'] },
  ),

  // Cleanup, launch, barriers, events
  t(
    'task_resource_cleanup_jobs',
    `id:uuid workspace_id:uuid task_id:uuid operation_id:uuid step_id:uuid? kind:str40 reason:str64 proof_json:doc
     proof_sha256:hash state:str16 generation:int=0 lease_owner:str200? lease_expires_at:ts? next_attempt_at:ts?
     attempt:int=0 error_code:str64? error_json:doc? ${STAMPS} finished_at:ts?`,
    {
      indexes: { ix_task_resource_cleanup_jobs_state_next_attempt_at: ['state', 'next_attempt_at'] },
      in: { kind: [...STEP_KINDS, 'launch_dispatch'], state: CLEANUP_JOB_STATES },
    },
  ),
  t(
    'task_launch_dispatch_claims',
    `id:uuid creation_operation_id:uuid task_id:uuid session_id:uuid workspace_id:uuid state:str16 generation:int=0
     lease_owner:str200? lease_expires_at:ts? lifecycle_generation:int idempotency_key:str255 request_sha256:hash
     runtime_handle:doc? evidence_json:doc? evidence_sha256:hash? deletion_operation_id:uuid? attempt:int=0
     error_code:str64? error_json:doc? ${STAMPS}`,
    {
      uniques: { uq_launch_dispatch: ['creation_operation_id', 'task_id', 'session_id'] },
      indexes: { ix_task_launch_dispatch_claims_state_updated_at: ['state', 'updated_at'] },
      in: { state: DISPATCH_STATES },
    },
  ),
  t(
    'archive_membership_barriers',
    `operation_id:uuid scope_workspace_id:uuid kind:str24 state:str16 ${CREATED} released_at:ts?`,
    {
      pk: ['operation_id', 'scope_workspace_id'],
      in: { kind: ['archive', 'workspace_deletion'], state: ['active', 'released'] },
      indexes: { ix_archive_membership_barriers_scope_state: ['scope_workspace_id', 'state'] },
    },
  ),
  t(
    'event_outbox',
    `seq:serial event_id:uuid workspace_id:uuid task_id:uuid revision:int type:str40 operation_id:uuid
     payload_json:doc payload_sha256:hash ${CREATED} delivered_at:ts? delivery_attempts:int=0`,
    {
      pk: ['seq'],
      uniques: { uq_event_outbox_event_id: ['event_id'], uq_event_outbox_task_revision: ['task_id', 'revision'] },
      indexes: {
        ix_event_outbox_delivered_at_seq: ['delivered_at', 'seq'],
        ix_event_outbox_workspace_seq: ['workspace_id', 'seq'],
        ix_event_outbox_operation_workspace_seq: ['operation_id', 'workspace_id', 'seq'],
      },
      in: { type: OUTBOX_EVENT_TYPES },
    },
  ),

  // Lifecycle operations
  t(
    'workspace_deletions',
    `id:uuid workspace_id:uuid state:str16 requested_by:str200 completed_creations:int=0 aborted_creations:int=0
     deleted_tasks:int=0 cancelled_launches:int=0 transferred_launches:int=0 cleanup_jobs:int=0
     waiting_operations:int=0 batches:int=0 requested_at:ts=now updated_at:ts=now completed_at:ts?`,
    {
      uniques: { uq_workspace_deletions_workspace: ['workspace_id'] },
      indexes: { ix_workspace_deletions_state: ['state'] },
      in: { state: WORKSPACE_DELETION_STATES },
    },
  ),
  t(
    'external_id_releases',
    `id:uuid workspace_id:uuid task_id:uuid creation_operation_id:uuid external_id:exact holder_state:str24
     state:str16 requested_by:str200 requested_at:ts=now updated_at:ts=now completed_at:ts?`,
    {
      indexes: {
        ix_external_id_releases_state: ['state'],
        ix_external_id_releases_operation: ['creation_operation_id'],
      },
      in: { state: RELEASE_STATES, holder_state: ['preparing', 'completed'] },
    },
  ),
];

export function expectedTable(name: string): ExpectedTable {
  const found = EXPECTED_TABLES.find((x) => x.name === name);
  if (!found) throw new Error(`no expected table ${name}`);
  return found;
}

/** Every CHECK constraint name the table must carry. */
export function expectedCheckNames(table: ExpectedTable): string[] {
  return [...Object.keys(table.in).map((c) => `chk_${table.name}_${c}`), ...table.extraChecks].sort();
}
