/**
 * The predecessors a plan names: its `workspace_attachment` request's
 * `blocker_ids` (at most one such step), de-duplicated and sorted — the order
 * their task rows are locked in (tier 5.2).
 */
import type { CreationPlan } from '../canonical/types';

export function planBlockerIds(plan: CreationPlan): string[] {
  const ids = new Set<string>();
  for (const step of plan.steps) {
    if (step.kind === 'workspace_attachment') step.request.blocker_ids.forEach((b) => ids.add(b));
  }
  return [...ids].sort();
}
