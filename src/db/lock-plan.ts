/**
 * The global lock order (shared/spec/companion-notes.md §1), enforced at run
 * time.
 *
 * Every transaction owns one LockPlan. Each acquisition names its tier and a
 * canonical key; the plan refuses (throws LockOrderError) any acquisition whose
 * tier is lower than the highest tier already held, or, inside one tier and
 * class, whose key sorts before the last key taken. Re-acquiring a key already
 * held is a no-op. Sub-tiers (5.1 external-ID keys before 5.2 task keys) encode
 * the order the notes give inside a tier.
 */
import { LockOrderError } from '../domain/errors';

export const TIER = {
  WORKSPACE: 1,
  /** The caller's authority row (API token), right after its workspace (docs/adr/0002-authority-tier.md). */
  AUTHORITY: 1.5,
  WORKFLOW: 2,
  /** Lifecycle operation rows (workspace deletions), before the barriers they own and the creations they touch. */
  LIFECYCLE_OPERATION: 4,
  /** Archive / deletion membership barriers, then creation operations (ascending UUID). */
  BARRIER: 4.1,
  OPERATION: 4.2,
  EXTERNAL_ID_KEY: 5.1,
  TASK: 5.2,
  IDENTITY: 6,
  STEP: 7,
  CLEANUP: 8.1,
  DISPATCH_CLAIM: 8.2,
  SESSION: 9,
  RUNTIME: 10,
  ENVIRONMENT: 11.1,
  ENVIRONMENT_REPO: 11.2,
  GROUP: 12.1,
  GROUP_MEMBER: 12.2,
  MARKER: 14,
  CONFIG: 15,
  OUTBOX: 16,
  AUDIT: 17,
} as const;
export type Tier = (typeof TIER)[keyof typeof TIER];

export class LockPlan {
  private currentTier = 0;
  private lastKey: string | null = null;
  private readonly held = new Set<string>();
  private readonly trail: string[] = [];

  /** Records an acquisition, or throws if it would invert the global order. */
  acquire(tier: Tier, key: string): 'new' | 'held' {
    const id = `${tier}|${key}`;
    if (this.held.has(id)) return 'held';
    if (tier < this.currentTier) {
      throw new LockOrderError(`lock order violation: tier ${tier} (${key}) requested after tier ${this.currentTier}`, {
        requested_tier: tier,
        held_tier: this.currentTier,
        trail: [...this.trail],
      });
    }
    if (tier === this.currentTier && this.lastKey !== null && key < this.lastKey) {
      throw new LockOrderError(`lock order violation: key ${key} requested after ${this.lastKey} in tier ${tier}`, {
        requested_tier: tier,
        trail: [...this.trail],
      });
    }
    this.currentTier = tier;
    this.lastKey = key;
    this.held.add(id);
    this.trail.push(id);
    return 'new';
  }

  /** Whether `acquire(tier, key)` would succeed now (held, or not below the order so far); changes nothing. */
  accepts(tier: Tier, key: string): boolean {
    if (this.held.has(`${tier}|${key}`)) return true;
    if (tier !== this.currentTier) return tier > this.currentTier;
    return this.lastKey === null || key >= this.lastKey;
  }

  /** Whether this lock was already acquired; changes nothing. */
  holds(tier: Tier, key: string): boolean {
    return this.held.has(`${tier}|${key}`);
  }

  /** The acquisitions so far, in order (for diagnostics and tests). */
  acquisitions(): readonly string[] {
    return this.trail;
  }
}
