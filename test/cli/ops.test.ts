/**
 * `taskledger ops list/show`: operations with an unknown step are listed by
 * `--state unknown`, and `show` prints the timeline. In-process (the command
 * reads TASKLEDGER_DB_URL, the project's test database). Both dialects.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { opsCommand } from '../../src/cli/ops';
import { armFailpoint, disarmAll } from '../../src/failpoints';
import { releaseExternalId } from '../../src/setup/release-external-id';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import { failTaskCreationStep } from '../../src/store/step-results';
import { captureConsole } from '../support/console';
import { sql, useTestDb } from '../support/db';
import { ambiguousFailure } from '../support/evidence';
import { begin, stepRows } from '../support/ledger';
import { seedWorkspace } from '../support/seed';

const t = useTestDb();
const cons = captureConsole();
afterEach(() => disarmAll());

describe('taskledger ops', () => {
  it('lists operations with an unknown step and shows their timeline', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
    const key = (await stepRows(t.db, res.operationId)).find((r) => r.kind === 'session_prepare')!.step_key;
    const claim = await claimTaskCreationStep(
      t.db,
      { kind: 'handle', handle: res.handle! },
      { kind: 'session_prepare', stepKey: key },
      'w1',
    );
    await failTaskCreationStep(t.db, claim, ambiguousFailure());

    expect(await opsCommand(['list', '--state', 'unknown', '--workspace', ws.workspaceId])).toBe(0);
    expect(cons.text()).toContain(res.operationId);

    cons.clear();
    expect(await opsCommand(['list', '--state', 'completed', '--workspace', ws.workspaceId])).toBe(0);
    expect(cons.text()).toContain('no creation operations match');

    cons.clear();
    expect(await opsCommand(['show', res.operationId])).toBe(0);
    const text = cons.text();
    expect(text).toContain(`operation  ${res.operationId}  preparing`);
    expect(text).toMatch(/session_prepare\s+\S+\s+unknown\s+1\s+1/);
    expect(text).toContain('launch_intent');
    expect(text).not.toContain('completion_token');

    cons.clear();
    expect(await opsCommand(['show', res.operationId, '--json'])).toBe(0);
    const doc = JSON.parse(cons.text()) as { steps: { kind: string; state: string }[] };
    expect(doc.steps.find((s) => s.kind === 'session_prepare')!.state).toBe('unknown');
  });

  it('shows the recovery claim and a cleanup job with the reason it was left for an operator', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
    const jobId = randomUUID();
    await sql(
      t.db,
      `UPDATE task_creation_operations SET recovery_action = 'retry_compensation', recovery_generation = 3, recovery_owner = 'reaper:x' WHERE id = ?`,
      [res.operationId],
    );
    await sql(
      t.db,
      `INSERT INTO task_resource_cleanup_jobs (id, workspace_id, task_id, operation_id, step_id, kind, reason, proof_json, proof_sha256, state, error_code, created_at, updated_at)
       VALUES (?, ?, ?, ?, NULL, 'fresh_branch_prepare', 'worktree_touched', '{}', ?, 'unknown', 'marker_mismatch', ${t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)'}, ${t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)'})`,
      [jobId, ws.workspaceId, res.task.id, res.operationId, 'b'.repeat(64)],
    );
    expect(await opsCommand(['show', res.operationId])).toBe(0);
    const text = cons.text();
    expect(text).toMatch(/recovery\s+retry_compensation\s+generation 3\s+owner reaper:x/);
    expect(text).toMatch(
      new RegExp(`${jobId}\\s+fresh_branch_prepare\\s+worktree_touched\\s+unknown\\s+0\\s+b{12}\\s+marker_mismatch`),
    );
  });

  it('lists a preparing-release operation and shows its release', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { external_id: 'ops-release' });
    expect(await opsCommand(['show', res.operationId])).toBe(0);
    expect(cons.text()).not.toContain('release ');
    armFailpoint('between_release_claim_and_apply', { kind: 'throw' }, { times: 1 });
    await expect(releaseExternalId(t.db, ws.workspaceId, 'ops-release', 'operator-7')).rejects.toThrow(/failpoint/);
    const [rel] = await sql<{ id: string }>(
      t.db,
      'SELECT id FROM external_id_releases WHERE creation_operation_id = ?',
      [res.operationId],
    );

    cons.clear();
    expect(await opsCommand(['list', '--state', 'preparing-release', '--workspace', ws.workspaceId])).toBe(0);
    expect(cons.text()).toMatch(new RegExp(`${res.operationId}\\s+preparing-release`));
    cons.clear();
    expect(await opsCommand(['show', res.operationId])).toBe(0);
    expect(cons.text()).toContain(`operation  ${res.operationId}  preparing-release`);
    expect(cons.text()).toMatch(
      new RegExp(
        `release\\s+${rel!.id}\\s+running\\s+holder preparing\\s+by operator-7\\s+requested \\S+\\s+completed -\\s+generation 1\\s+applied false`,
      ),
    );
  });

  it('refuses bad arguments and reports a missing operation', async () => {
    expect(await opsCommand(['list', '--state', 'bogus'])).toBe(2);
    expect(cons.err.join('\n')).toContain('unknown state "bogus"');
    expect(await opsCommand(['show', 'not-an-id'])).toBe(2);
    expect(await opsCommand(['show', randomUUID()])).toBe(1);
    expect(await opsCommand(['frob'])).toBe(2);
    expect(await opsCommand(['list', '--nope'])).toBe(2);
  });
});
