/**
 * `session_prepare`: the prepared `task_sessions` row and its resource
 * markers. Database only: `perform` runs `applySessionPrepare`, whose one
 * transaction writes the rows and the step's outcome together, and refuses
 * (`unknown`) when a runtime already exists for the session. A stale claim
 * propagates as `ConflictError('stale_claim')` with nothing written.
 *
 * observe (read-only): exact session and marker rows with no runtime ->
 * present; none of them and no runtime -> absent; else conflict.
 */
import {
  applySessionPrepare,
  applySessionPrepareLocked,
  observeSessionPrepare,
  sessionPrepareApplyLocks,
} from './ledger';
import { failpoint } from '../../failpoints';
import type { StepHandler } from '../contract';

export const sessionPrepareHandler: StepHandler<'session_prepare'> = {
  kind: 'session_prepare',
  applyInClaim: applySessionPrepareLocked,
  applyLocks: sessionPrepareApplyLocks,
  async perform(deps, claim) {
    // Effect and record are one transaction here, so the lost-ack window is empty: the failpoint sits just
    // before that transaction, where a crash leaves a claimed step with no effect (observed absent -> retry).
    await failpoint('after_effect_before_record', {
      kind: claim.kind,
      operationId: claim.operationId,
      stepId: claim.stepId,
    });
    return (await applySessionPrepare(deps.db, claim)).state;
  },
  observe(deps, step) {
    return observeSessionPrepare(deps.db, step);
  },
};
