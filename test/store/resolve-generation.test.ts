/**
 * ResolveTaskCreationStep with the generation its proof was observed at: a
 * step that moved on since (resolved, claimed again, unknown again) is
 * `stale_claim` with zero writes, so a slow reconciler's old observation
 * never decides a newer attempt; the current generation resolves. Both
 * dialects.
 */
import { describe, expect, it } from 'vitest';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import { failTaskCreationStep, resolveTaskCreationStep } from '../../src/store/step-results';
import type { OperationAuthority } from '../../src/store/types';
import { useTestDb } from '../support/db';
import { absentEvidence, ambiguousFailure } from '../support/evidence';
import { begin, expectTyped, snapshot, stepRows } from '../support/ledger';
import { seedWorkspace } from '../support/seed';

const t = useTestDb();

describe('resolving from an observation at a known generation', () => {
  it('refuses an observation older than the step, with zero writes, and accepts the current one', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    const row = (await stepRows(t.db, res.operationId)).find((r) => r.kind === 'session_prepare')!;
    const ref = { kind: 'session_prepare' as const, stepKey: row.step_key };
    const recovery: OperationAuthority = { kind: 'operation', operationId: res.operationId, actor: 'reaper:a' };

    // Attempt 1 ends unknown; reaper A observes it at generation 1 (and then stalls).
    const first = await claimTaskCreationStep(t.db, auth, ref, 'worker-1');
    expect(await failTaskCreationStep(t.db, first, ambiguousFailure())).toBe('unknown');
    const observedByA = first.generation;
    // Reaper B resolves it, a worker retries (generation 3), and that attempt ends unknown too.
    expect(
      await resolveTaskCreationStep(t.db, recovery, ref, {
        resolution: 'retry_wait',
        evidence: absentEvidence(first),
        observedGeneration: first.generation,
      }),
    ).toBe('retry_wait');
    const second = await claimTaskCreationStep(t.db, auth, ref, 'worker-2');
    expect(second.generation).toBeGreaterThan(observedByA);
    expect(await failTaskCreationStep(t.db, second, ambiguousFailure())).toBe('unknown');

    // A wakes up with its old observation: refused, nothing written.
    const before = await snapshot(t.db, res.operationId, res.task.id);
    await expectTyped(
      resolveTaskCreationStep(t.db, recovery, ref, {
        resolution: 'retry_wait',
        evidence: absentEvidence(first),
        observedGeneration: observedByA,
      }),
      'stale_claim',
    );
    expect(await snapshot(t.db, res.operationId, res.task.id)).toBe(before);
    // An observation of the current attempt resolves.
    expect(
      await resolveTaskCreationStep(t.db, recovery, ref, {
        resolution: 'retry_wait',
        evidence: absentEvidence(second),
        observedGeneration: second.generation,
      }),
    ).toBe('retry_wait');
  });
});
