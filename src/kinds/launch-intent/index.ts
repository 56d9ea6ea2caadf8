/**
 * `launch_intent`: the retained step row is the intent, armed with exact
 * evidence in one transaction (step.ts, ledger.ts). Never compensated (V7):
 * before Complete it has dispatched nothing, normal Abort refuses an armed
 * intent, and only workspace deletion cancels one — so it is never
 * transferred to a cleanup job either. What a launch starts is the dispatch
 * claim's (src/launch/, src/store/launch-dispatch.ts).
 */
import type { StepKindModule } from '../contract';
import { launchIntentLocks, verifyLaunchIntentLocked } from './ledger';
import { launchIntentHandler } from './step';

export const launchIntent: StepKindModule<'launch_intent'> = {
  ...launchIntentHandler,
  verifier: { locks: launchIntentLocks, verify: verifyLaunchIntentLocked },
  undo: null,
  cleanup: null,
};
