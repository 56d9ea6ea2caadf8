/**
 * Start policy resolution (protocol, "Canonical bindings": manifest cardinality).
 *
 * Contract of `resolveStartPolicy(startAgent, blockedBy)`:
 * - `start_agent` false → `none` (even with blockers: nothing is ever launched).
 * - `start_agent` true and `blocked_by` empty → `immediate` (the plan carries
 *   exactly one `session_prepare` and one `launch_intent`).
 * - `start_agent` true and `blocked_by` non-empty → `deferred` (no session or
 *   launch steps; one start-when-unblocked intent). A non-empty list always
 *   selects `deferred`: creation never evaluates predecessor state, so an
 *   already-resolved predecessor still defers the launch.
 * Pure: reads only its arguments.
 */
import type { StartPolicy } from '../domain/vocab';

export function resolveStartPolicy(startAgent: boolean, blockedBy: readonly string[]): StartPolicy {
  if (!startAgent) return 'none';
  return blockedBy.length === 0 ? 'immediate' : 'deferred';
}
