/**
 * What a recovery action runs with (runtime/recover.ts and the actions it
 * calls): the effect dependencies and handlers, the queues for wake-ups, the
 * recovery claim's owner and lease, metrics; and the authority each of its
 * Store calls carries (the claim as a RecoveryFence: a stale claim writes
 * nothing).
 */
import type { QueueSet } from '../coordinator/queues';
import type { Logger } from '../log';
import type { Metrics } from '../metrics';
import type { StepHandlers } from '../kinds/registry';
import type { EffectDeps } from '../kinds/contract';
import type { RecoveryClaim } from '../store/recovery';
import type { OperationAuthority } from '../store/types';

export interface RecoverDeps {
  effects: EffectDeps;
  handlers: StepHandlers;
  queues: QueueSet | null;
  log: Logger;
  /** The recovery claim's owner (one per reaper / worker; at most 200 printable ASCII characters). */
  actor: string;
  /** Recovery lease; default the step lease. */
  leaseMs?: number;
  /** `taskledger_reconciliations_total` and the stuck-operations gauge; none in tests that do not look. */
  metrics?: Metrics | null;
}

export interface ReconcileCounts {
  succeeded: number;
  retry: number;
  stillUnknown: number;
}

/** Every Store call of an action carries its recovery claim: a stale claim writes nothing (RecoveryFence). */
export const auth = (claim: RecoveryClaim): OperationAuthority => ({
  kind: 'operation',
  operationId: claim.operationId,
  actor: claim.owner,
  recovery: { generation: claim.generation, owner: claim.owner },
});
