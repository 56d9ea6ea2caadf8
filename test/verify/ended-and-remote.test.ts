/**
 * `taskledger verify` on the states a review found it misjudged, and on the
 * rules it checks for ended creations:
 * - compensated effects of a creation on its way to Abort are gone by design,
 *   not drift, and an aborted creation verifies clean until a step breaks
 *   Abort's own rule or its task row comes back;
 * - a pull request whose state changed is still the recorded association,
 *   and a provider that cannot be reached leaves the effect unobserved (not
 *   drift);
 * - a completed creation with a step that is not done is drift.
 * Both dialects.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { runPendingCompensations } from '../../src/compensation/run';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { abortTaskCreation } from '../../src/store/abort';
import { completeTaskCreation } from '../../src/store/complete';
import type { OperationAuthority } from '../../src/store/types';
import type { VerifyReport } from '../../src/verify/drift';
import { verifyLedger } from '../../src/verify/run';
import { sql, useTestDb } from '../support/db';
import { begin, driveAllSteps } from '../support/ledger';
import type { SeededWorkspace } from '../support/seed';
import { bodyFor, failedCreation, realDeps, recovery, seeded, useFakeProvider } from '../compensation/support';

const t = useTestDb();
const fake = useFakeProvider();
let pr = 700;

function verify(ws: SeededWorkspace): Promise<VerifyReport> {
  return verifyLedger(
    { db: t.db, effects: realDeps(t.db, ws.dataDir), handlers: defaultStepHandlers },
    { workspaceId: ws.workspaceId, observe: true, maxDrift: 100, pageSize: 50 },
  );
}

const findings = (r: VerifyReport) => r.drift.map((d) => `${d.code} ${d.subject.split('/')[0]}: ${d.message}`);

describe('verify on compensated and aborted creations', () => {
  it('does not re-observe compensated effects; an aborted creation must keep to Abort’s rule', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const c = await failedCreation(t.db, ws, ['workspace_attachment', 'fresh_branch_prepare'], 'attachment_claim', pr);
    await runPendingCompensations(c.deps, c.operationId, 'worker-1');
    // Still preparing, both effects undone by compensation: nothing to observe, nothing drifted.
    const compensated = await verify(ws);
    expect(findings(compensated)).toEqual([]);
    expect(compensated.counts.observed).toBe(0);

    await abortTaskCreation(t.db, recovery(c.operationId), 'step_failed');
    expect(findings(await verify(ws))).toEqual([]);

    await sql(
      t.db,
      "UPDATE task_creation_steps SET compensation_state = 'none', compensation_evidence_sha256 = ? WHERE id = ?",
      ['e'.repeat(64), c.step('fresh_branch_prepare').id],
    );
    expect(findings(await verify(ws))).toEqual([
      'compensation_proof step fresh_branch_prepare: compensation proof does not hash to its stored hash',
      'step_state step fresh_branch_prepare: aborted, but effect exists and was neither compensated nor transferred',
    ]);
  });
});

describe('verify on a pull request association', () => {
  async function associated() {
    const ws = await seeded(t.db, fake.server, ++pr);
    const res = await begin(t.db, ws, bodyFor(ws, ['remote_contribution_associate'], pr));
    await driveAllSteps(t.db, { kind: 'handle', handle: res.handle! }, res.operationId, ws.dataDir);
    return { ws, res };
  }

  it('a merged pull request is still the recorded association: no drift', async () => {
    const { ws } = await associated();
    fake.server.setState('acme/app', pr, 'merged');
    const report = await verify(ws);
    expect(findings(report)).toEqual([]);
    expect(report.counts).toMatchObject({ observed: 1, unobserved: 0 });
  });

  it('a provider that cannot be reached leaves the effect unobserved, not drifted', async () => {
    const { ws } = await associated();
    fake.server.injectFault({ path: /./, fault: 500, times: 20 });
    try {
      const report = await verify(ws);
      expect(findings(report)).toEqual([]);
      expect(report.counts).toMatchObject({ observed: 1, unobserved: 1 });
      expect(report.unobserved.map((u) => u.message)).toEqual([
        expect.stringMatching(/^recorded succeeded, observed unobservable: provider read failed/),
      ]);
    } finally {
      fake.server.clearFaults();
    }
  });
});

describe('verify on a completed creation', () => {
  it('reports a step that is not done in a completed creation', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const res = await begin(t.db, ws, { ...bodyFor(ws, ['workspace_attachment'], pr), external_id: randomUUID() });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
    expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
    expect(findings(await verify(ws))).toEqual([]);

    await sql(t.db, "UPDATE task_creation_steps SET state = 'retry_wait' WHERE operation_id = ?", [res.operationId]);
    expect(findings(await verify(ws))).toEqual([
      'step_state step workspace_attachment: step is retry_wait in a completed creation',
    ]);
  });
});
