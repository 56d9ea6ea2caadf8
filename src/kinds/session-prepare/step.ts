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
import { ledgerOnlyHandler } from '../ledger-only';
import {
  applySessionPrepare,
  applySessionPrepareLocked,
  observeSessionPrepare,
  sessionPrepareApplyLocks,
  sessionPrepareApplyReads,
} from './ledger';

export const sessionPrepareHandler = ledgerOnlyHandler({
  kind: 'session_prepare',
  apply: applySessionPrepare,
  applyInClaim: applySessionPrepareLocked,
  applyLocks: sessionPrepareApplyLocks,
  applyReads: sessionPrepareApplyReads,
  observe: observeSessionPrepare,
});
