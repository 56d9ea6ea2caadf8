/**
 * The session/launch pair of a plan: the `session_prepare` and
 * `launch_intent` steps an `immediate` plan carries, and the same pair a
 * `deferred` plan's start-when-unblocked intent (`deferred_launch`)
 * materializes when its dependencies resolve (`src/store/deferred-launch.ts`).
 * One builder for both, so a promoted pair is exactly the pair Begin would
 * have planned, and its requests, hashes and idempotency keys re-derive from
 * the stored plan alone.
 */
import type { CreationPlan, DeferredLaunch, PlanStep } from '../canonical/types';

export function sessionLaunchSteps(
  taskId: string,
  workspaceId: string,
  taskEnvironmentId: string,
  launch: DeferredLaunch,
): [PlanStep, PlanStep] {
  const base = { task_id: taskId, workspace_id: workspaceId };
  return [
    {
      kind: 'session_prepare',
      step_key: launch.session_id,
      request: {
        ...base,
        session_id: launch.session_id,
        task_environment_id: taskEnvironmentId,
        executor_id: launch.executor_id,
        executor_profile_id: launch.executor_profile_id,
        agent_profile_id: launch.agent_profile_id,
        launch_config_sha256: launch.launch_config_sha256,
        resource_keys: [`session:${launch.session_id}`],
      },
    },
    { kind: 'launch_intent', step_key: launch.session_id, request: { ...base, ...launch } },
  ];
}

/**
 * The pair a `deferred` plan promotes to, in plan order (`launch_intent`
 * sorts before `session_prepare`); empty for any other plan. The session's
 * environment is the plan's own `task_environments` row, the one Begin
 * inserted for it.
 */
export function promotedSteps(plan: CreationPlan): PlanStep[] {
  if (plan.start_policy !== 'deferred' || plan.deferred_launch === null) return [];
  const env = plan.database_rows.find((r) => r.table === 'task_environments');
  if (!env) return [];
  const [session, launch] = sessionLaunchSteps(plan.task_id, plan.workspace_id, env.key, plan.deferred_launch);
  return [launch, session];
}
