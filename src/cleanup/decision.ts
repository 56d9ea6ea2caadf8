/**
 * What a cleanup performer decided for one job, from its proof and what it
 * re-observed: undo the proof's rows and finish `done` (`rows`), try again
 * later (`retry`: the world could not be read or changed transiently), or
 * leave it for an operator (`unknown`: the proof no longer matches — nothing
 * was touched).
 */
import type { Tx } from '../db/tx';
import type { LockNeed } from '../store/effects/row-locks';

export type CleanupDecision =
  | { kind: 'rows'; note: string; extraLocks?: LockNeed[]; blocked?: (tx: Tx) => Promise<string | null> }
  | { kind: 'retry'; code: string; message: string; uncounted?: boolean }
  | { kind: 'unknown'; code: string; message: string };

export const rowsDecision = (note: string): CleanupDecision => ({ kind: 'rows', note });
export const retryDecision = (code: string, message: string): CleanupDecision => ({ kind: 'retry', code, message });
/** Another host's job: back soon, and the visit is not counted as an attempt (no back-off builds up). */
export const elsewhereDecision = (code: string, message: string): CleanupDecision => ({
  kind: 'retry',
  code,
  message,
  uncounted: true,
});
export const unknownDecision = (code: string, message: string): CleanupDecision => ({ kind: 'unknown', code, message });
