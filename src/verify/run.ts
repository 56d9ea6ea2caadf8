/**
 * `taskledger verify`'s loop: page through every creation operation (or one
 * workspace's) in id order, check each page's ledger rows (verify/checks.ts),
 * re-observe unfinished creations' effects (verify/observe.ts, unless
 * `observe` is false), and report progress after each page. Read-only:
 * snapshots for the ledger, the kinds' `observe` for the world. Pages start
 * from operations; a last pass (verify/orphans.ts) finds the events,
 * dispatch claims and cleanup jobs whose operation row is missing, and a
 * lifecycle pass (verify/lifecycle.ts) checks WIP slots and queues, launch
 * counts, deleted tasks and workspace deletions; with observation, an
 * kinds' own passes (`verifyPass`, e.g. src/kinds/attachment-claim/verify.ts) look at their files.
 */
import type { Db } from '../db/tx';
import type { StepHandlers } from '../kinds/registry';
import type { EffectDeps } from '../kinds/contract';
import { checkOperation } from './checks';
import type { Drift, VerifyCounts, VerifyReport } from './drift';
import { readLedgerPage } from './ledger-page';
import { observeOperation } from './observe';
import { STEP_KIND_MODULES } from '../kinds/registry';
import { checkLifecycle } from './lifecycle';
import { findOrphans } from './orphans';

/** Why 10,000: orphans mean hand edits or a broken restore; beyond this many of one kind the count stops mattering. */
const ORPHANS_PER_KIND = 10_000;

export interface VerifyOptions {
  workspaceId?: string;
  /** Re-observe unfinished creations' effects (default true). */
  observe: boolean;
  /** Findings kept in the report; the rest are only counted. */
  maxDrift: number;
  /** Operations per snapshot. */
  pageSize: number;
}

export interface VerifyDeps {
  db: Db;
  /** Needed only when observing. */
  effects: EffectDeps | null;
  handlers: StepHandlers;
}

export type VerifyProgress = (counts: VerifyCounts, driftSoFar: number) => void;

export async function verifyLedger(
  deps: VerifyDeps,
  options: VerifyOptions,
  progress: VerifyProgress = () => undefined,
): Promise<VerifyReport> {
  const counts: VerifyCounts = {
    operations: 0,
    steps: 0,
    events: 0,
    dispatch_claims: 0,
    cleanup_jobs: 0,
    observed: 0,
    unobserved: 0,
  };
  const drift: Drift[] = [];
  const unobserved: Drift[] = [];
  const byCode: VerifyReport['drift_by_code'] = {};
  let total = 0;
  const keep = (found: Drift[]) => {
    total += found.length;
    for (const d of found) {
      byCode[d.code] = (byCode[d.code] ?? 0) + 1;
      if (drift.length < options.maxDrift) drift.push(d);
    }
  };
  let cursor: string | null = null;
  for (;;) {
    const page = await readLedgerPage(deps.db, { cursor, limit: options.pageSize, workspaceId: options.workspaceId });
    if (page.length === 0) break;
    for (const rec of page) {
      counts.operations++;
      counts.steps += rec.steps.length;
      counts.events += rec.events.length;
      counts.dispatch_claims += rec.claims.length;
      counts.cleanup_jobs += rec.cleanupJobs.length;
      keep(checkOperation(rec));
      if (options.observe && deps.effects) {
        const seen = await observeOperation(deps.effects, deps.handlers, rec);
        counts.observed += seen.observed;
        counts.unobserved += seen.unobserved.length;
        for (const u of seen.unobserved) if (unobserved.length < options.maxDrift) unobserved.push(u);
        keep(seen.drift);
      }
    }
    cursor = page[page.length - 1]!.op.id;
    progress(counts, total);
    if (page.length < options.pageSize) break;
  }
  keep(await findOrphans(deps.db, { workspaceId: options.workspaceId, limit: ORPHANS_PER_KIND }));
  keep(await checkLifecycle(deps.db, { workspaceId: options.workspaceId }));
  if (options.observe && deps.effects) {
    const files = { db: deps.db, dataDir: deps.effects.dataDir };
    for (const module of Object.values(STEP_KIND_MODULES)) {
      if (module.verifyPass)
        keep(await module.verifyPass(files, { workspaceId: options.workspaceId, limit: ORPHANS_PER_KIND }));
    }
  }
  return { counts, drift_by_code: byCode, drift, more: total - drift.length, unobserved };
}
