/**
 * `buildCreationPlan(req, ctx)`: a validated create request plus its loaded
 * context → the complete CreationPlan and the row documents it binds.
 *
 * Contract (protocol "Canonical bindings" and "Closed step schemas"):
 * - Pure and deterministic: the same request, context and `newId` sequence give
 *   a byte-identical plan. IDs are drawn in a fixed order: session (when
 *   starting), task environment (when needed), then one environment-repo ID per
 *   fresh-branch repository in request order.
 * - Referenced IDs must be in the context, else `ValidationError` naming the
 *   field (`/repositories/<i>/repository_id`, `/contributions/<i>/repository_id`,
 *   `/attachments/<i>`, `/agent_profile_id`, `/workflow_step_id`, `/parent_id`,
 *   `/workspace_policy/...`; `<i>` indexes the validated list, which is sorted
 *   for attachments and contributions). An attachment is bound exactly as the
 *   context describes its staged row.
 * - Cardinality: start policy from `resolveStartPolicy`; `immediate` → one
 *   `session_prepare` + one `launch_intent` (step key = the session UUID);
 *   `deferred` → neither, `deferred_launch` filled; `none` → neither, null.
 *   `start_agent` requires a resolvable `agent_profile_id`. 0/1
 *   `workspace_attachment` (`resolveWorkspacePolicy`, key = workspace-policy
 *   hash); 1 `attachment_claim` per non-empty set (key = attachment-set hash);
 *   1 `fresh_branch_prepare` per fresh-branch repository (key = env-repo UUID);
 *   1 `remote_contribution_associate` per contribution (key
 *   `provider:connection:kind:id`). One task environment row when the plan has a
 *   fresh branch, a session or a deferred launch.
 * - Steps sorted by (kind, step_key), rows by (table, key), ID lists sorted.
 * - Guards (programming errors, plain `Error`): a duplicate (kind, step_key),
 *   two steps claiming one effect authority, a context that contradicts the
 *   request, a `newId` that repeats or is not a lowercase UUID.
 * - The result is checked by `validateCreationPlan` (closed schema, list order,
 *   plan invariants) before it is returned.
 */
import { canonicalJson } from '../canonical/canonical-json';
import { createRequestHash, domainHash } from '../canonical/hash';
import type { DeferredLaunch, PlanStep, StepRequestByKind } from '../canonical/types';
import { validateCreationPlan } from '../canonical/validate';
import { ValidationError } from '../domain/errors';
import type { StepKind } from '../domain/vocab';
import { contributionKey, validatedRequestDocument, type CreateTaskRequest } from './create-request';
import { launchConfigSha256 } from './launch-config';
import { freshBranchName, pathSha256, worktreeRelativePath, worktreeSegments } from './fresh-branch';
import { planDatabaseRows } from './plan-rows';
import type { AgentProfileInfo, BuiltPlan, PlanContext, PlannedRows, RepositoryInfo } from './plan-types';
import { sessionLaunchSteps } from './session-launch';
import { resolveStartPolicy } from './start-policy';
import { idSource, sortAndGuardSteps } from './step-guards';
import { resolveWorkspacePolicy } from './workspace-policy';

export type {
  AgentProfileInfo,
  BuiltPlan,
  IdentityRowDoc,
  PlanContext,
  PlannedRows,
  RepositoryInfo,
  StagedAttachmentInfo,
  TaskEnvironmentRowDoc,
  TaskRepositoryRowDoc,
  TaskRowDoc,
} from './plan-types';

export const WORKSPACE_POLICY_DOMAIN = 'kandev/task-creation-workspace-policy/v1';
export const ATTACHMENT_SET_DOMAIN = 'kandev/task-creation-attachment-set/v1';
export { LAUNCH_CONFIG_DOMAIN } from './launch-config';

function lookup<T>(table: Readonly<Record<string, T>>, id: string): T | undefined {
  return Object.prototype.hasOwnProperty.call(table, id) ? table[id] : undefined;
}

function checkContext(req: CreateTaskRequest, ctx: PlanContext): void {
  if (ctx.workspaceId !== req.workspace_id) throw new Error('plan context workspace does not match the request');
  if (req.task_id !== null && ctx.taskId !== req.task_id)
    throw new Error('plan context task ID does not match request.task_id');
  if (req.parent_id === ctx.taskId) throw new ValidationError('/parent_id', 'a task cannot be its own parent');
  const self = req.blocked_by.indexOf(ctx.taskId);
  if (self >= 0) throw new ValidationError(`/blocked_by/${self}`, 'a task cannot block itself');
  if (req.workflow_step_id !== null && ctx.workflow?.workflow_step_id !== req.workflow_step_id) {
    throw new ValidationError(
      '/workflow_step_id',
      `unknown workflow step ${req.workflow_step_id} in workspace ${req.workspace_id}`,
    );
  }
}

function resolveAgentProfile(req: CreateTaskRequest, ctx: PlanContext): AgentProfileInfo | null {
  if (!req.start_agent) return null;
  if (req.agent_profile_id === null)
    throw new ValidationError('/agent_profile_id', 'required when start_agent is true');
  if (ctx.agentProfile === null || ctx.agentProfile.id !== req.agent_profile_id) {
    throw new ValidationError(
      '/agent_profile_id',
      `unknown agent profile ${req.agent_profile_id} in workspace ${req.workspace_id}`,
    );
  }
  return ctx.agentProfile;
}

function resolveRepository(ctx: PlanContext, id: string, field: string): RepositoryInfo {
  const info = lookup(ctx.repositories, id);
  if (info === undefined || info.id !== id)
    throw new ValidationError(field, `unknown repository ${id} in workspace ${ctx.workspaceId}`);
  return info;
}

function step<K extends StepKind>(kind: K, stepKey: string, request: StepRequestByKind[K]): PlanStep {
  return { kind, step_key: stepKey, request } as PlanStep;
}

/** Builds and self-validates the CreationPlan; see the file contract. */
export function buildCreationPlan(req: CreateTaskRequest, ctx: PlanContext): BuiltPlan {
  checkContext(req, ctx);
  const taskId = ctx.taskId;
  const workspaceId = ctx.workspaceId;
  const startPolicy = resolveStartPolicy(req.start_agent, req.blocked_by);
  const profile = resolveAgentProfile(req, ctx);

  const repos = req.repositories.map((r, i) => ({
    req: r,
    position: i,
    info: resolveRepository(ctx, r.repository_id, `/repositories/${i}/repository_id`),
  }));
  req.contributions.forEach((c, i) => resolveRepository(ctx, c.repository_id, `/contributions/${i}/repository_id`));
  const claimItems = req.attachments.map((id, i) => {
    const a = lookup(ctx.attachments, id);
    if (a === undefined || a.id !== id) {
      throw new ValidationError(
        `/attachments/${i}`,
        `unknown attachment ${id} (no staged attachment with this ID in workspace ${workspaceId})`,
      );
    }
    return { attachment_id: id, staging_owner_id: a.staging_owner_id, content_sha256: a.content_sha256, size: a.size };
  });
  const attachment = resolveWorkspacePolicy({
    taskId,
    workspaceId,
    parentId: req.parent_id,
    policy: req.workspace_policy,
    parent: ctx.parent,
    blockedBy: req.blocked_by,
    environments: ctx.environments,
    groups: ctx.groups,
  });

  // IDs, in the fixed order documented above.
  const nextId = idSource(ctx);
  const sessionId = startPolicy === 'none' ? null : nextId();
  const fresh = repos.filter((r) => r.req.fresh_branch);
  const taskEnvironmentId = fresh.length > 0 || sessionId !== null ? nextId() : null;
  const envRepoIds = fresh.map(() => nextId());

  const steps: PlanStep[] = [];
  if (attachment !== null) {
    const { mode, group_id, environment_id, member_ids, blocker_ids } = attachment;
    const key = domainHash(
      WORKSPACE_POLICY_DOMAIN,
      canonicalJson({ mode, group_id, environment_id, member_ids, blocker_ids }),
    );
    steps.push(step('workspace_attachment', key, attachment));
  }
  if (claimItems.length > 0) {
    const key = domainHash(ATTACHMENT_SET_DOMAIN, canonicalJson(claimItems.map((a) => a.attachment_id)));
    steps.push(step('attachment_claim', key, { task_id: taskId, workspace_id: workspaceId, attachments: claimItems }));
  }
  const segments = worktreeSegments(fresh.map((r) => r.info));
  fresh.forEach((r, i) => {
    const envRepoId = envRepoIds[i] as string;
    const segment = segments.get(r.info.id) as string;
    steps.push(
      step('fresh_branch_prepare', envRepoId, {
        task_id: taskId,
        workspace_id: workspaceId,
        repository_id: r.info.id,
        task_environment_id: taskEnvironmentId as string,
        task_environment_repo_id: envRepoId,
        resource_key: `worktree:${envRepoId}`,
        canonical_path_sha256: pathSha256(worktreeRelativePath(workspaceId, taskId, r.info.id)),
        branch: freshBranchName(taskId, segment, fresh.length),
        base_commit: r.info.base_commit,
      }),
    );
  });
  for (const c of req.contributions) {
    steps.push(
      step('remote_contribution_associate', contributionKey(c), { ...c, workspace_id: workspaceId, task_id: taskId }),
    );
  }

  let deferredLaunch: DeferredLaunch | null = null;
  if (sessionId !== null && profile !== null && taskEnvironmentId !== null) {
    const launch = {
      session_id: sessionId,
      agent_profile_id: profile.id,
      executor_id: profile.executor_kind,
      executor_profile_id: `${profile.executor_kind}:${profile.id}`,
      launch_config_sha256: launchConfigSha256({
        agent_profile_id: profile.id,
        executor: profile.executor,
        session_id: sessionId,
        task_id: taskId,
        task_environment_id: taskEnvironmentId,
      }),
    };
    if (startPolicy === 'immediate') {
      steps.push(...sessionLaunchSteps(taskId, workspaceId, taskEnvironmentId, launch));
    } else {
      deferredLaunch = launch;
    }
  }

  const rows: PlannedRows = {
    tasks: {
      id: taskId,
      workspace_id: workspaceId,
      workflow_id: ctx.workflow?.workflow_id ?? null,
      workflow_step_id: ctx.workflow?.workflow_step_id ?? null,
      parent_id: req.parent_id,
      title: req.title,
      description: req.description,
      start_policy: startPolicy,
    },
    task_identities: { task_id: taskId, workspace_id: workspaceId },
    task_repositories: repos.map((r) => ({
      task_id: taskId,
      repository_id: r.info.id,
      workspace_id: workspaceId,
      position: r.position,
      base_branch: r.req.base_branch ?? r.info.default_branch,
      fresh_branch: r.req.fresh_branch,
    })),
    task_environments:
      taskEnvironmentId === null
        ? []
        : [{ id: taskEnvironmentId, workspace_id: workspaceId, task_id: taskId, kind: 'task' }],
  };
  const plan = validateCreationPlan({
    version: 1,
    task_id: taskId,
    workspace_id: workspaceId,
    workflow_id: ctx.workflow?.workflow_id ?? null,
    workflow_step_id: ctx.workflow?.workflow_step_id ?? null,
    parent_id: req.parent_id,
    request_sha256: createRequestHash(validatedRequestDocument(req)),
    start_policy: startPolicy,
    deferred_launch: deferredLaunch,
    database_rows: planDatabaseRows(rows),
    steps: sortAndGuardSteps(steps),
  });
  return { plan, rows, sessionId };
}
