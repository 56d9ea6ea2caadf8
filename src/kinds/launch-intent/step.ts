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
import { ledgerOnlyHandler } from '../ledger-only';
import {
  armExactLaunchIntent,
  armExactLaunchIntentLocked,
  launchIntentApplyLocks,
  observeLaunchIntent,
} from './ledger';

export const launchIntentHandler = ledgerOnlyHandler({
  kind: 'launch_intent',
  apply: armExactLaunchIntent,
  applyInClaim: armExactLaunchIntentLocked,
  applyLocks: launchIntentApplyLocks,
  observe: observeLaunchIntent,
});
