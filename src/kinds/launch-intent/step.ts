/**
 * `launch_intent`: the retained step row is the intent. `perform` arms it
 * with exact evidence (`intent_sha256` over operation, step and request;
 * `dispatched: false`) through `armExactLaunchIntent`, which requires
 * PreLaunchArmPredicate and proves, under lock, that no dispatch claim or
 * runtime exists. Nothing is launched here: dispatch starts only after
 * Complete. A stale claim or a false predicate propagates as a typed
 * conflict with nothing written.
 *
 * observe (read-only): armed with this exact intent and no dispatch ->
 * present; not armed and no dispatch -> absent; else conflict.
 */
import {
  armExactLaunchIntent,
  armExactLaunchIntentLocked,
  launchIntentApplyLocks,
  observeLaunchIntent,
} from './ledger';
import { failpoint } from '../../failpoints';
import type { StepHandler } from '../contract';

export const launchIntentHandler: StepHandler<'launch_intent'> = {
  kind: 'launch_intent',
  applyInClaim: armExactLaunchIntentLocked,
  applyLocks: launchIntentApplyLocks,
  async perform(deps, claim) {
    // Effect and record are one transaction here, so the lost-ack window is empty: the failpoint sits just
    // before that transaction, where a crash leaves a claimed step with no effect (observed absent -> retry).
    await failpoint('after_effect_before_record', {
      kind: claim.kind,
      operationId: claim.operationId,
      stepId: claim.stepId,
    });
    return (await armExactLaunchIntent(deps.db, claim)).state;
  },
  observe(deps, step) {
    return observeLaunchIntent(deps.db, step);
  },
};
