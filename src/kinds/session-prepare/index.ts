/**
 * `session_prepare`: the prepared `task_sessions` row and its resource
 * markers, written with the step's outcome in one transaction (step.ts,
 * ledger.ts), undone by compensation.ts, cleaned from a transferred proof by
 * cleanup.ts.
 */
import type { StepKindModule } from '../contract';
import { cleanPreparedSession } from './cleanup';
import { undoSessionPrepare } from './compensation';
import { sessionPrepareLocks, verifySessionPrepareLocked } from './ledger';
import { sessionPrepareHandler } from './step';

export const sessionPrepare: StepKindModule<'session_prepare'> = {
  ...sessionPrepareHandler,
  verifier: { locks: sessionPrepareLocks, verify: verifySessionPrepareLocked },
  undo: undoSessionPrepare,
  cleanup: (_deps, _job, proof) => cleanPreparedSession(proof),
};
