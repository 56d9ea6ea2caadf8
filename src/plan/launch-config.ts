/**
 * The launch configuration binding (`launch_config_sha256` of the
 * `session_prepare` and `launch_intent` requests): the agent profile's
 * executor document as planned, bound to its profile, session, task and task
 * environment. The plan builder computes it at Begin; the launch worker
 * computes it again from the executor it is about to run, right before the
 * start, and starts nothing when the two differ (the profile changed since
 * Begin: the launch would run another command than the one the creation
 * proved).
 */
import { canonicalJson } from '../canonical/canonical-json';
import { domainHash } from '../canonical/hash';

export const LAUNCH_CONFIG_DOMAIN = 'kandev/task-launch-config/v1';

export interface LaunchConfig {
  agent_profile_id: string;
  /** The agent profile's executor document (`agent_profiles.executor_json`, parsed). */
  executor: Record<string, unknown>;
  session_id: string;
  task_id: string;
  task_environment_id: string;
}

export function launchConfigSha256(c: LaunchConfig): string {
  return domainHash(
    LAUNCH_CONFIG_DOMAIN,
    canonicalJson({
      agent_profile_id: c.agent_profile_id,
      executor: c.executor,
      session_id: c.session_id,
      task_id: c.task_id,
      task_environment_id: c.task_environment_id,
    }),
  );
}
