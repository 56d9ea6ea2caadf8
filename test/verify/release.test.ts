/**
 * `taskledger verify`'s external-ID release checks: a completed holder's
 * release, an applied release of a preparing holder and a release whose
 * releaser died after its claim all verify clean; each tampered row is
 * reported as `external_id_release`, and nothing else is. Both dialects.
 */
import { describe, expect, it } from 'vitest';
import { armFailpoint, disarmAll } from '../../src/failpoints';
import { releaseExternalId } from '../../src/setup/release-external-id';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { completeTaskCreation } from '../../src/store/complete';
import type { BeginResult } from '../../src/store/types';
import type { VerifyReport } from '../../src/verify/drift';
import { verifyLedger } from '../../src/verify/run';
import { sql, useTestDb } from '../support/db';
import { begin, driveAllSteps } from '../support/ledger';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';

const t = useTestDb();

interface World {
  ws: SeededWorkspace;
  /** Completed, then released. */
  completed: BeginResult;
  /** Preparing, released (applied). */
  applied: BeginResult;
  /** Preparing-release: the releaser died after its claim. */
  claimed: BeginResult;
}

async function world(): Promise<World> {
  const ws = await seedWorkspace(t.db);
  const completed = await begin(t.db, ws, { external_id: 'v-completed' });
  const auth = { kind: 'handle' as const, handle: completed.handle! };
  await driveAllSteps(t.db, auth, completed.operationId, ws.dataDir);
  await completeTaskCreation(t.db, auth);
  await releaseExternalId(t.db, ws.workspaceId, 'v-completed', 'operator-1');
  const applied = await begin(t.db, ws, { external_id: 'v-applied' });
  await releaseExternalId(t.db, ws.workspaceId, 'v-applied', 'operator-1');
  const claimed = await begin(t.db, ws, { external_id: 'v-claimed' });
  armFailpoint('between_release_claim_and_apply', { kind: 'throw' }, { times: 1 });
  try {
    await expect(releaseExternalId(t.db, ws.workspaceId, 'v-claimed', 'operator-1')).rejects.toThrow(/failpoint/);
  } finally {
    disarmAll();
  }
  return { ws, completed, applied, claimed };
}

const verify = (ws: SeededWorkspace): Promise<VerifyReport> =>
  verifyLedger(
    { db: t.db, effects: null, handlers: defaultStepHandlers },
    { workspaceId: ws.workspaceId, observe: false, maxDrift: 100, pageSize: 50 },
  );

const findings = (r: VerifyReport) => r.drift.map((d) => `${d.code} ${d.operation_id} ${d.message}`).sort();

describe('verify: external-ID releases', () => {
  it('finds no drift in a completed holder’s release, an applied release and one stuck after its claim', async () => {
    const w = await world();
    const report = await verify(w.ws);
    expect(report.counts.operations).toBe(3);
    expect(report.drift).toEqual([]);
  });

  it('reports each release that disagrees with its creation', async () => {
    const w = await world();
    // The stuck release marked completed while its creation is still preparing-release.
    await sql(t.db, "UPDATE external_id_releases SET state = 'completed' WHERE creation_operation_id = ?", [
      w.claimed.operationId,
    ]);
    // The completed holder's task got its ID back after the release.
    await sql(t.db, "UPDATE tasks SET external_id = 'v-completed' WHERE id = ?", [w.completed.task.id]);
    // The applied release's row says running while its creation is preparing again.
    await sql(t.db, "UPDATE external_id_releases SET state = 'running' WHERE creation_operation_id = ?", [
      w.applied.operationId,
    ]);
    // release_applied on a creation whose ID was never released.
    const plain = await begin(t.db, w.ws, {});
    await sql(
      t.db,
      `UPDATE task_creation_operations SET release_applied = ${t.db.dialect === 'postgres' ? 'true' : '1'} WHERE id = ?`,
      [plain.operationId],
    );

    const [stuck] = await sql<{ id: string }>(
      t.db,
      'SELECT id FROM external_id_releases WHERE creation_operation_id = ?',
      [w.claimed.operationId],
    );

    const report = await verify(w.ws);
    expect(findings(report)).toEqual(
      [
        `external_id_release ${w.claimed.operationId} preparing-release, but its release ${stuck!.id} is completed`,
        // ...and that release, completed in name only, left the ID on its task.
        `external_id_release ${w.claimed.operationId} completed, but its task still has an external ID`,
        `external_id_release ${w.completed.operationId} completed, but its task still has an external ID`,
        `external_id_release ${w.applied.operationId} running, but its creation is preparing`,
        `external_id_release ${w.applied.operationId} release_applied without a completed release of it`,
        `external_id_release ${plain.operationId} release_applied without a completed release of it`,
      ].sort(),
    );
  });
});
