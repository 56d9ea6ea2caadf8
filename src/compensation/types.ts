/**
 * The per-kind compensation contract (one file per kind under
 * `src/compensation/`). An undo runs only with a live CompensationClaim,
 * observes the real effect first, does its I/O (Git, provider, files)
 * outside any SQL transaction, acts only on exact ownership proof (marker,
 * ownership hash, row hash), and records the result only through the Store
 * (`settleTaskCreationCompensation` / `completeTaskCreationCompensation`,
 * compare-and-set on the claim). It is idempotent: run again after a crash
 * (compensation `unknown`, src/compensation/reconcile.ts) it finds what is
 * already undone and finishes the rest.
 */
import type { SettledCompensation } from '../store/compensation';
import type { CompensationClaim } from '../store/types';
import type { EffectDeps } from '../kinds/contract';

export type CompensationUndo = (deps: EffectDeps, claim: CompensationClaim) => Promise<SettledCompensation>;
