/**
 * `fresh_branch_prepare`: a Git worktree on a new branch (step.ts, Git
 * between the two ledger transactions of ledger.ts; what Git says about a
 * worktree in worktree-state.ts), its undo (compensation.ts with
 * git-worktree.ts) and the cleanup of a transferred worktree: removed when
 * untouched, quarantined otherwise (cleanup.ts).
 */
import type { StepKindModule } from '../contract';
import { cleanWorktree } from './cleanup';
import { undoFreshBranchPrepare } from './compensation';
import { freshBranchLocks, verifyFreshBranchLocked } from './ledger';
import { freshBranchPrepareHandler } from './step';

export const freshBranchPrepare: StepKindModule<'fresh_branch_prepare'> = {
  ...freshBranchPrepareHandler,
  verifier: { locks: freshBranchLocks, verify: verifyFreshBranchLocked },
  undo: undoFreshBranchPrepare,
  cleanup: cleanWorktree,
};
