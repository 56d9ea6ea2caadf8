/**
 * `session_prepare` and `launch_intent` against the real database: the
 * prepared session and its markers written with the step's success, the
 * launch intent armed with exact no-dispatch evidence, refusal when a runtime
 * or dispatch already exists, stale deliveries, and observation. Runs on
 * PostgreSQL and MySQL/MariaDB.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { rowHash } from '../../src/canonical/hash';
import type { LaunchIntentRequest, SessionPrepareRequest } from '../../src/canonical/types';
import { validateStepEvidence } from '../../src/canonical/validate';
import { launchIntentHandler } from '../../src/kinds/launch-intent/step';
import { sessionPrepareHandler } from '../../src/kinds/session-prepare/step';
import { launchIntentSha256 } from '../../src/kinds/launch-intent/ledger';
import { resourceMarkerSha256 } from '../../src/store/effects/recording';
import { sessionDoc } from '../../src/store/effects/row-documents';
import { count, sql, useTestDb } from '../support/db';
import { expectTyped } from '../support/ledger';
import {
  claimKind,
  createTask,
  effectSnapshot,
  executorsRunningInsert,
  loadStep,
  noHeartbeat,
  seedWithFiles,
  stepState,
} from './support';

const t = useTestDb();

async function setup() {
  const { ws, deps } = await seedWithFiles(t.db);
  const c = await createTask(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
  const claim = await claimKind(t.db, c.auth, c.operationId, 'session_prepare');
  const req = claim.request as SessionPrepareRequest;
  return { ws, deps, c, claim, req, snap: () => effectSnapshot(t.db, c.operationId, c.taskId) };
}

async function prepared() {
  const s = await setup();
  await sessionPrepareHandler.perform(s.deps, s.claim, noHeartbeat);
  const launch = await claimKind(t.db, s.c.auth, s.c.operationId, 'launch_intent');
  return { ...s, launch };
}

describe('session_prepare', () => {
  it('inserts the prepared session and one marker per resource key, with exact evidence', async () => {
    const s = await setup();
    expect(await sessionPrepareHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('succeeded');
    const [session] = await sql(t.db, 'SELECT * FROM task_sessions WHERE id = ?', [s.req.session_id]);
    expect(session).toMatchObject({
      task_id: s.c.taskId,
      environment_id: s.req.task_environment_id,
      executor_id: s.req.executor_id,
      executor_profile_id: s.req.executor_profile_id,
      agent_profile_id: s.ws.agentProfileId,
      launch_config_sha256: s.req.launch_config_sha256,
      state: 'prepared',
      operation_id: s.c.operationId,
      step_id: s.claim.stepId,
    });
    const markers = await sql(t.db, 'SELECT * FROM task_resource_markers WHERE task_id = ?', [s.c.taskId]);
    expect(markers.map((m) => m.resource_key)).toEqual(s.req.resource_keys);
    const markerSha = resourceMarkerSha256(s.c.operationId, s.claim.stepId, s.req.resource_keys[0]!);
    expect(markers[0]).toMatchObject({ kind: 'session', marker_sha256: markerSha, step_id: s.claim.stepId });

    const { state, evidence } = await stepState(t.db, s.claim.stepId);
    expect(state).toBe('succeeded');
    validateStepEvidence(evidence, {
      kind: 'session_prepare',
      step_key: s.claim.stepKey,
      request_sha256: s.claim.requestSha256,
    });
    expect(evidence!.observation).toEqual({
      session_row_sha256: rowHash(sessionDoc(session!)),
      resource_markers: [{ resource_key: s.req.resource_keys[0], marker_sha256: markerSha }],
      runtime_absent: true,
    });
  });

  it('a second delivery of the same claim is stale and changes nothing', async () => {
    const s = await setup();
    await sessionPrepareHandler.perform(s.deps, s.claim, noHeartbeat);
    const before = await s.snap();
    await expectTyped(sessionPrepareHandler.perform(s.deps, s.claim, noHeartbeat), 'stale_claim');
    expect(await s.snap()).toBe(before);
  });

  it('a runtime already running for the session: unknown, no session row', async () => {
    const s = await setup();
    await sql(t.db, executorsRunningInsert(t.db), [
      randomUUID(),
      s.req.session_id,
      s.c.taskId,
      s.ws.workspaceId,
      randomUUID(),
    ]);
    expect(await sessionPrepareHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('unknown');
    const st = await stepState(t.db, s.claim.stepId);
    expect(st.error_code).toBe('runtime_present');
    expect(st.evidence!.effect).toBe('conflict');
    expect(await count(t.db, 'task_sessions', 'id = ?', [s.req.session_id])).toBe(0);
    expect(await count(t.db, 'task_resource_markers', 'task_id = ?', [s.c.taskId])).toBe(0);
  });

  it('observe: absent before, present after, conflict when a marker changes', async () => {
    const s = await setup();
    expect((await sessionPrepareHandler.observe(s.deps, await loadStep(t.db, s.claim.stepId))).effect).toBe(
      'absent_proven',
    );
    await sessionPrepareHandler.perform(s.deps, s.claim, noHeartbeat);
    const step = await loadStep(t.db, s.claim.stepId);
    const present = await sessionPrepareHandler.observe(s.deps, step);
    expect(present.effect).toBe('present_exact');
    expect(present.evidence.observation).toEqual(JSON.parse(step.evidence_json!).observation);
    await sql(t.db, 'UPDATE task_resource_markers SET marker_sha256 = ? WHERE task_id = ?', [
      'c'.repeat(64),
      s.c.taskId,
    ]);
    const conflict = await sessionPrepareHandler.observe(s.deps, step);
    expect(conflict.effect).toBe('conflict');
    // The evidence names every own row as found: the changed marker by its new hash, the session by its own.
    const [marker] = await sql(
      t.db,
      'SELECT resource_key, workspace_id, task_id, operation_id, step_id, kind, marker_sha256 FROM task_resource_markers WHERE task_id = ?',
      [s.c.taskId],
    );
    expect(conflict.evidence.observation.rows).toContainEqual({
      table: 'task_resource_markers',
      key: marker!.resource_key,
      row_sha256: rowHash({ ...marker }),
    });
    expect(conflict.evidence.observation.rows).toContainEqual(
      expect.objectContaining({ table: 'task_sessions', key: s.req.session_id, row_sha256: expect.any(String) }),
    );
  });
});

describe('launch_intent', () => {
  it('arms the intent with exact, un-dispatched evidence', async () => {
    const s = await prepared();
    expect(await launchIntentHandler.perform(s.deps, s.launch, noHeartbeat)).toBe('armed');
    const { state, evidence } = await stepState(t.db, s.launch.stepId);
    expect(state).toBe('armed');
    validateStepEvidence(evidence, {
      kind: 'launch_intent',
      step_key: s.launch.stepKey,
      request_sha256: s.launch.requestSha256,
    });
    const owner = { operation_id: s.c.operationId, step_id: s.launch.stepId };
    expect(evidence!.observation).toEqual({
      intent_sha256: launchIntentSha256(owner, s.launch.request as LaunchIntentRequest),
      dispatched: false,
    });
    expect(await count(t.db, 'task_launch_dispatch_claims', 'task_id = ?', [s.c.taskId])).toBe(0);
  });

  it('a second delivery of the same claim is stale and changes nothing', async () => {
    const s = await prepared();
    await launchIntentHandler.perform(s.deps, s.launch, noHeartbeat);
    const before = await s.snap();
    await expectTyped(launchIntentHandler.perform(s.deps, s.launch, noHeartbeat), 'stale_claim');
    expect(await s.snap()).toBe(before);
  });

  it('a runtime before Complete is never armed: unknown', async () => {
    const s = await prepared();
    await sql(t.db, executorsRunningInsert(t.db), [
      randomUUID(),
      s.req.session_id,
      s.c.taskId,
      s.ws.workspaceId,
      randomUUID(),
    ]);
    expect(await launchIntentHandler.perform(s.deps, s.launch, noHeartbeat)).toBe('unknown');
    expect((await stepState(t.db, s.launch.stepId)).error_code).toBe('runtime_present');
  });

  it('observe: absent until armed, present when armed, conflict once a dispatch claim exists', async () => {
    const s = await prepared();
    expect((await launchIntentHandler.observe(s.deps, await loadStep(t.db, s.launch.stepId))).effect).toBe(
      'absent_proven',
    );
    await launchIntentHandler.perform(s.deps, s.launch, noHeartbeat);
    const step = await loadStep(t.db, s.launch.stepId);
    const present = await launchIntentHandler.observe(s.deps, step);
    expect(present.effect).toBe('present_exact');
    expect(present.evidence.observation).toEqual(JSON.parse(step.evidence_json!).observation);
    const now = t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)';
    await sql(
      t.db,
      `INSERT INTO task_launch_dispatch_claims (id, creation_operation_id, task_id, session_id, workspace_id, state, lifecycle_generation,
                                                idempotency_key, request_sha256, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, 'running', 1, ?, ?, ${now}, ${now})`,
      [
        randomUUID(),
        s.c.operationId,
        s.c.taskId,
        s.req.session_id,
        s.ws.workspaceId,
        `task-launch/${s.c.operationId}/${s.req.session_id}`,
        'd'.repeat(64),
      ],
    );
    expect((await launchIntentHandler.observe(s.deps, step)).effect).toBe('conflict');
  });
});
