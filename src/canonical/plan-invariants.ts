/**
 * Cross-field rules of step requests and plans that a JSON Schema cannot
 * express, asserted after schema validation and list order.
 *
 * Contract (each violation throws `ValidationError(<pointer>, ..., 'invalid_document')`):
 * - Step requests: a workspace attachment never blocks on or parents its own
 *   task; `inherit_parent` needs a parent; members need a group and
 *   repositories need an environment.
 * - Step keys are canonical per kind (protocol "Closed step schemas"):
 *   `fresh_branch_prepare` -> environment-repo UUID,
 *   `remote_contribution_associate` -> `provider:connection:contribution-kind:contribution-id`,
 *   `session_prepare` and `launch_intent` -> session UUID,
 *   `workspace_attachment` / `attachment_claim` -> a SHA-256 hex (policy /
 *   attachment-set hash, computed by the plan builder).
 * - Plans: every request names the plan's task and workspace (and the
 *   attachment its parent); cardinality is closed: at most one
 *   `workspace_attachment` and one `attachment_claim`; `immediate` has exactly
 *   one `session_prepare` and one `launch_intent` for the same session and
 *   launch configuration, `none`/`deferred` have neither; `deferred_launch` is
 *   null unless `deferred`; no two steps claim one effect authority (same
 *   repository, same resource key).
 */
import { ValidationError } from '../domain/errors';
import type { StepKind } from '../domain/vocab';
import { SHA256_PATTERN } from './schemas/fragments';
import type {
  CreationPlan,
  LaunchIntentRequest,
  PlanStep,
  SessionPrepareRequest,
  StepRequestByKind,
  WorkspaceAttachmentRequest,
} from './types';

function fail(field: string, message: string): never {
  throw new ValidationError(field, message, 'invalid_document');
}

const HASH = new RegExp(SHA256_PATTERN);

/**
 * The canonical `step_key` of a step whose key is derived from its request, or
 * `null` for kinds keyed by a hash the plan builder computes.
 */
export function derivedStepKey<K extends StepKind>(kind: K, request: StepRequestByKind[K]): string | null {
  const r = request;
  switch (kind) {
    case 'fresh_branch_prepare':
      return (r as StepRequestByKind['fresh_branch_prepare']).task_environment_repo_id;
    case 'remote_contribution_associate': {
      const rc = r as StepRequestByKind['remote_contribution_associate'];
      return `${rc.provider}:${rc.connection_id}:${rc.contribution_kind}:${rc.contribution_id}`;
    }
    case 'session_prepare':
    case 'launch_intent':
      return (r as SessionPrepareRequest | LaunchIntentRequest).session_id;
    default:
      return null;
  }
}

/** Cross-field rules of one (schema-valid) step request. */
export function checkStepRequestInvariants(kind: StepKind, request: unknown, base = ''): void {
  if (kind !== 'workspace_attachment') return;
  const r = request as WorkspaceAttachmentRequest;
  if (r.parent_id === r.task_id) fail(`${base}/parent_id`, 'a task cannot be its own parent');
  if (r.mode === 'inherit_parent' && r.parent_id === null)
    fail(`${base}/parent_id`, 'inherit_parent needs a parent_id');
  if (r.group_id === null && r.member_ids.length > 0) fail(`${base}/member_ids`, 'members need a group_id');
  if (r.environment_id === null && r.repository_ids.length > 0) {
    fail(`${base}/repository_ids`, 'environment repositories need an environment_id');
  }
  const self = r.blocker_ids.indexOf(r.task_id);
  if (self >= 0) fail(`${base}/blocker_ids/${self}`, 'a task cannot block itself');
}

function checkStepKey(step: PlanStep, base: string): void {
  const derived = derivedStepKey(step.kind, step.request);
  if (derived === null) {
    if (!HASH.test(step.step_key))
      fail(`${base}/step_key`, `a ${step.kind} step_key must be a SHA-256 hash (64 lowercase hex characters)`);
  } else if (step.step_key !== derived) {
    fail(`${base}/step_key`, `must be the canonical ${step.kind} key ${JSON.stringify(derived)}`);
  }
}

function checkSameLaunch(session: SessionPrepareRequest, launch: LaunchIntentRequest, base: string): void {
  for (const f of [
    'session_id',
    'agent_profile_id',
    'executor_id',
    'executor_profile_id',
    'launch_config_sha256',
  ] as const) {
    if (session[f] !== launch[f]) fail(`${base}/request/${f}`, `must equal the session_prepare step's ${f}`);
  }
}

/** Cross-field rules of one (schema-valid, list-ordered) plan. */
export function checkPlanInvariants(plan: CreationPlan): void {
  const count: Partial<Record<StepKind, number>> = {};
  const repositories = new Map<string, number>();
  const resources = new Map<string, string>();
  let session: SessionPrepareRequest | null = null;
  let launch: { request: LaunchIntentRequest; index: number } | null = null;

  const claimResource = (key: string, field: string): void => {
    const prior = resources.get(key);
    if (prior !== undefined) fail(field, `resource key ${JSON.stringify(key)} is already claimed at ${prior}`);
    resources.set(key, field);
  };

  for (const [i, step] of plan.steps.entries()) {
    const base = `/steps/${i}`;
    count[step.kind] = (count[step.kind] ?? 0) + 1;
    if (step.request.task_id !== plan.task_id) fail(`${base}/request/task_id`, "must equal the plan's task_id");
    if (step.request.workspace_id !== plan.workspace_id) {
      fail(`${base}/request/workspace_id`, "must equal the plan's workspace_id");
    }
    checkStepRequestInvariants(step.kind, step.request, `${base}/request`);
    checkStepKey(step, base);
    switch (step.kind) {
      case 'workspace_attachment':
        if (step.request.parent_id !== plan.parent_id)
          fail(`${base}/request/parent_id`, "must equal the plan's parent_id");
        break;
      case 'fresh_branch_prepare': {
        const prior = repositories.get(step.request.repository_id);
        if (prior !== undefined)
          fail(`${base}/request/repository_id`, `repository already prepared by /steps/${prior}`);
        repositories.set(step.request.repository_id, i);
        claimResource(step.request.resource_key, `${base}/request/resource_key`);
        break;
      }
      case 'session_prepare':
        session = step.request;
        step.request.resource_keys.forEach((k, j) => claimResource(k, `${base}/request/resource_keys/${j}`));
        break;
      case 'launch_intent':
        launch = { request: step.request, index: i };
        break;
      default:
        break;
    }
  }

  for (const kind of ['workspace_attachment', 'attachment_claim'] as const) {
    if ((count[kind] ?? 0) > 1) fail('/steps', `a plan has at most one ${kind} step`);
  }
  const sessions = count.session_prepare ?? 0;
  const launches = count.launch_intent ?? 0;
  if (plan.start_policy === 'immediate') {
    if (sessions !== 1 || launches !== 1) {
      fail('/steps', 'an immediate plan has exactly one session_prepare and one launch_intent step');
    }
    if (session !== null && launch !== null) checkSameLaunch(session, launch.request, `/steps/${launch.index}`);
  } else if (sessions !== 0 || launches !== 0) {
    fail('/steps', `a ${plan.start_policy} plan has no session_prepare or launch_intent step`);
  }
  if (plan.start_policy !== 'deferred' && plan.deferred_launch !== null) {
    fail('/deferred_launch', `must be null unless start_policy is "deferred"`);
  }
}
