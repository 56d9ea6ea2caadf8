/**
 * `workspace_attachment` against the real database: membership, blocker and
 * binding rows written with the step's success in one transaction, exact
 * evidence, stale deliveries, failure classes when the world moved, and
 * observation. Runs on PostgreSQL and MySQL/MariaDB.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { rowHash } from '../../src/canonical/hash';
import { validateStepEvidence } from '../../src/canonical/validate';
import { workspaceAttachmentHandler } from '../../src/kinds/workspace-attachment/step';
import {
  blockerDoc,
  environmentBindingDoc,
  environmentRepoDoc,
  groupMemberDoc,
} from '../../src/store/effects/row-documents';
import { count, sql, useTestDb } from '../support/db';
import { expectTyped, settledTask } from '../support/ledger';
import { claimKind, createTask, effectSnapshot, loadStep, noHeartbeat, seedWithFiles, stepState } from './support';

const t = useTestDb();
const now = () => (t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)');

async function setup() {
  const { ws, deps } = await seedWithFiles(t.db);
  const blocker = await settledTask(t.db, ws, { title: 'blocker' });
  const c = await createTask(t.db, ws, {
    blocked_by: [blocker.task.id],
    workspace_policy: { mode: 'shared_group', group_id: ws.groupId, environment_id: ws.sharedEnvironmentId },
  });
  const claim = await claimKind(t.db, c.auth, c.operationId, 'workspace_attachment');
  return { ws, deps, c, claim, blockerId: blocker.task.id, snap: () => effectSnapshot(t.db, c.operationId, c.taskId) };
}

describe('workspace_attachment perform', () => {
  it('writes member, blocker and binding rows owned by the step, with evidence that repeats their hashes', async () => {
    const s = await setup();
    expect(await workspaceAttachmentHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('succeeded');

    const members = await sql(t.db, 'SELECT * FROM workspace_group_members WHERE task_id = ?', [s.c.taskId]);
    expect(members).toHaveLength(1);
    expect(members[0]).toMatchObject({
      group_id: s.ws.groupId,
      role: 'member',
      operation_id: s.c.operationId,
      step_id: s.claim.stepId,
    });
    const blockers = await sql(t.db, 'SELECT * FROM task_blockers WHERE task_id = ?', [s.c.taskId]);
    expect(blockers).toHaveLength(1);
    expect(blockers[0]).toMatchObject({ blocker_task_id: s.blockerId, step_id: s.claim.stepId });
    const bindings = await sql(t.db, 'SELECT * FROM task_environment_bindings WHERE task_id = ?', [s.c.taskId]);
    expect(bindings[0]).toMatchObject({ environment_id: s.ws.sharedEnvironmentId, step_id: s.claim.stepId });
    const envRepos = await sql(t.db, 'SELECT * FROM task_environment_repos WHERE environment_id = ?', [
      s.ws.sharedEnvironmentId,
    ]);

    const { state, evidence } = await stepState(t.db, s.claim.stepId);
    expect(state).toBe('succeeded');
    validateStepEvidence(evidence, {
      kind: 'workspace_attachment',
      step_key: s.claim.stepKey,
      request_sha256: s.claim.requestSha256,
    });
    expect(evidence!.effect).toBe('present_exact');
    expect(evidence!.observation).toEqual({
      policy_mode: 'shared_group',
      group_member_rows: [
        {
          group_id: s.ws.groupId,
          task_id: s.c.taskId,
          role: 'member',
          row_sha256: rowHash(groupMemberDoc(members[0]!)),
        },
      ],
      blocker_rows: [
        { task_id: s.c.taskId, blocker_task_id: s.blockerId, row_sha256: rowHash(blockerDoc(blockers[0]!)) },
      ],
      environment_binding: {
        environment_id: s.ws.sharedEnvironmentId,
        task_id: s.c.taskId,
        row_sha256: rowHash(environmentBindingDoc(bindings[0]!)),
      },
      environment_repo_rows: [
        {
          id: envRepos[0]!.id,
          repository_id: s.ws.repositoryId,
          row_sha256: rowHash(environmentRepoDoc(envRepos[0]!)),
        },
      ],
      owner_operation_id: s.c.operationId,
      step_generation: s.claim.generation,
    });
  });

  it('a second delivery of the same claim is stale and changes nothing', async () => {
    const s = await setup();
    await workspaceAttachmentHandler.perform(s.deps, s.claim, noHeartbeat);
    const before = await s.snap();
    await expectTyped(workspaceAttachmentHandler.perform(s.deps, s.claim, noHeartbeat), 'stale_claim');
    await expectTyped(
      workspaceAttachmentHandler.perform(s.deps, { ...s.claim, generation: s.claim.generation + 1 }, noHeartbeat),
      'stale_claim',
    );
    expect(await s.snap()).toBe(before);
  });

  it('a group deleted after planning fails permanently with absent proof and writes no row', async () => {
    const s = await setup();
    await sql(t.db, 'DELETE FROM workspace_groups WHERE id = ?', [s.ws.groupId]);
    expect(await workspaceAttachmentHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('failed');
    const st = await stepState(t.db, s.claim.stepId);
    expect(st.error_code).toBe('group_missing');
    expect(st.evidence!.effect).toBe('absent_proven');
    expect(st.evidence!.observation.rows).toContainEqual({
      table: 'workspace_groups',
      key: s.ws.groupId,
      row_sha256: null,
    });
    expect(await count(t.db, 'workspace_group_members', 'task_id = ?', [s.c.taskId])).toBe(0);
    expect(await count(t.db, 'task_blockers', 'task_id = ?', [s.c.taskId])).toBe(0);
    expect(await count(t.db, 'task_environment_bindings', 'task_id = ?', [s.c.taskId])).toBe(0);
  });

  it('a deleted blocker fails permanently (blocker_missing)', async () => {
    const s = await setup();
    await sql(t.db, "UPDATE tasks SET lifecycle_state = 'deleted' WHERE id = ?", [s.blockerId]);
    expect(await workspaceAttachmentHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('failed');
    expect((await stepState(t.db, s.claim.stepId)).error_code).toBe('blocker_missing');
  });

  it('a foreign binding in the way is ambiguous: unknown with conflict evidence, the foreign row untouched', async () => {
    const s = await setup();
    const otherEnv = randomUUID();
    await sql(
      t.db,
      `INSERT INTO task_environment_bindings (task_id, environment_id, workspace_id, operation_id, step_id, created_at) VALUES (?, ?, ?, ?, ?, ${now()})`,
      [s.c.taskId, otherEnv, s.ws.workspaceId, randomUUID(), randomUUID()],
    );
    expect(await workspaceAttachmentHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('unknown');
    const st = await stepState(t.db, s.claim.stepId);
    expect(st.error_code).toBe('foreign_row');
    expect(st.evidence!.effect).toBe('conflict');
    const [b] = await sql(
      t.db,
      'SELECT task_id, environment_id, workspace_id, operation_id, step_id FROM task_environment_bindings WHERE task_id = ?',
      [s.c.taskId],
    );
    expect(b!.environment_id).toBe(otherEnv);
    // The evidence names the foreign row as found, by its hash; the expected member row, absent, by null.
    expect(st.evidence!.observation.rows).toContainEqual({
      table: 'task_environment_bindings',
      key: s.c.taskId,
      row_sha256: rowHash({ ...b }),
    });
    expect(st.evidence!.observation.rows).toContainEqual(
      expect.objectContaining({ table: 'workspace_group_members', row_sha256: null }),
    );
    expect(await count(t.db, 'workspace_group_members', 'task_id = ?', [s.c.taskId])).toBe(0);
  });

  it('an environment whose repositories changed since planning is a conflict (unknown)', async () => {
    const s = await setup();
    await sql(
      t.db,
      `INSERT INTO task_environment_repos (id, environment_id, workspace_id, repository_id, created_at) VALUES (?, ?, ?, ?, ${now()})`,
      [randomUUID(), s.ws.sharedEnvironmentId, s.ws.workspaceId, randomUUID()],
    );
    expect(await workspaceAttachmentHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('unknown');
    expect((await stepState(t.db, s.claim.stepId)).error_code).toBe('environment_changed');
    expect(await count(t.db, 'task_environment_bindings', 'task_id = ?', [s.c.taskId])).toBe(0);
  });
});

describe('workspace_attachment observe', () => {
  it('absent before, present (same observation as recorded) after, conflict once a row changes', async () => {
    const s = await setup();
    const before = await workspaceAttachmentHandler.observe(s.deps, await loadStep(t.db, s.claim.stepId));
    expect(before.effect).toBe('absent_proven');
    expect(before.evidence.effect).toBe('absent_proven');

    await workspaceAttachmentHandler.perform(s.deps, s.claim, noHeartbeat);
    const step = await loadStep(t.db, s.claim.stepId);
    const present = await workspaceAttachmentHandler.observe(s.deps, step);
    expect(present.effect).toBe('present_exact');
    expect(present.evidence.observation).toEqual(JSON.parse(step.evidence_json!).observation);

    await sql(t.db, "UPDATE workspace_group_members SET role = 'lead' WHERE task_id = ?", [s.c.taskId]);
    const changed = await workspaceAttachmentHandler.observe(s.deps, step);
    expect(changed.effect).toBe('conflict');
    expect(changed.evidence.effect).toBe('conflict');
  });
});
