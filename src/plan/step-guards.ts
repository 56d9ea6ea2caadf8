/**
 * Programming-error guards of the plan builder (protocol: "Duplicate kind/key or
 * two steps claiming the same effect authority is invalid at Begin").
 *
 * Contract:
 * - `sortAndGuardSteps(steps)` returns the steps sorted by (kind, step_key) in
 *   UTF-16 code-unit order (`compareCanonicalKeys`, the validator's order) and
 *   throws a plain `Error` on a duplicate (kind, step_key) or when two steps
 *   claim one effect authority (a group membership, a blocker edge, a staged
 *   attachment, a resource key, a worktree path, an environment repository, a
 *   remote contribution, a session or a launch).
 * - `idSource(ctx)` wraps `ctx.newId`, refusing a value that is not a lowercase
 *   UUID or that repeats (the task ID or an earlier draw).
 */
import { UUID_PATTERN } from '../canonical/schemas/fragments';
import { compareCanonicalKeys } from '../canonical/sorted-lists';
import type { PlanStep } from '../canonical/types';
import type { PlanContext } from './plan-types';

const UUID = new RegExp(UUID_PATTERN);

export function idSource(ctx: Pick<PlanContext, 'taskId' | 'newId'>): () => string {
  const seen = new Set<string>([ctx.taskId]);
  return () => {
    const id = ctx.newId();
    if (typeof id !== 'string' || !UUID.test(id))
      throw new Error(`newId() returned ${String(id)}, not a lowercase UUID`);
    if (seen.has(id)) throw new Error(`newId() repeated ${id}`);
    seen.add(id);
    return id;
  };
}

/** The effect authorities one step claims. */
export function authoritiesOf(step: PlanStep): string[] {
  switch (step.kind) {
    case 'workspace_attachment': {
      const r = step.request;
      return [
        `task-binding:${r.task_id}`,
        ...r.member_ids.map((m) => `group-member:${r.group_id ?? ''}:${m}`),
        ...r.blocker_ids.map((b) => `blocker:${r.task_id}:${b}`),
      ];
    }
    case 'attachment_claim':
      return step.request.attachments.map((a) => `attachment:${a.attachment_id}`);
    case 'fresh_branch_prepare': {
      const r = step.request;
      return [
        `resource:${r.resource_key}`,
        `worktree-path:${r.canonical_path_sha256}`,
        `env-repo:${r.task_environment_id}:${r.repository_id}`,
      ];
    }
    case 'remote_contribution_associate': {
      const r = step.request;
      return [`contribution:${r.provider}:${r.connection_id}:${r.contribution_kind}:${r.contribution_id}`];
    }
    case 'session_prepare':
      return [`session:${step.request.session_id}`, ...step.request.resource_keys.map((k) => `resource:${k}`)];
    case 'launch_intent':
      return [`launch:${step.request.session_id}`];
  }
}

export function sortAndGuardSteps(steps: readonly PlanStep[]): PlanStep[] {
  const sorted = [...steps].sort((a, b) => compareCanonicalKeys([a.kind, a.step_key], [b.kind, b.step_key]));
  const keys = new Set<string>();
  const authorities = new Map<string, string>();
  for (const step of sorted) {
    const id = `${step.kind}/${step.step_key}`;
    if (keys.has(id)) throw new Error(`plan builder produced duplicate step ${id}`);
    keys.add(id);
    for (const a of authoritiesOf(step)) {
      const prior = authorities.get(a);
      if (prior !== undefined) throw new Error(`steps ${prior} and ${id} claim one effect authority (${a})`);
      authorities.set(a, id);
    }
  }
  return sorted;
}
