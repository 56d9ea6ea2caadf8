/**
 * The HTTP mapping of every create outcome and every typed error, with a
 * createTask that answers whatever the test asks for (the body names it), and
 * the creation counter those answers feed.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { CreateTaskFn, CreateTaskOutcome } from '../../src/coordinator/create-task';
import { ConflictError, TaskLedgerError, ValidationError, type ErrorCode } from '../../src/domain/errors';
import type { BeginOutcome } from '../../src/domain/vocab';
import type { TaskView } from '../../src/store/types';
import { useTestDb } from '../support/db';
import { call, useTestApi } from './helpers';

const t = useTestDb();

function taskView(): TaskView {
  const id = randomUUID();
  return {
    id,
    workspace_id: randomUUID(),
    title: 'stub',
    description: null,
    external_id: 'ext-42',
    creation_state: 'completed',
    creation_complete: true,
    creation_operation_id: randomUUID(),
    workflow_id: null,
    workflow_step_id: null,
    parent_id: null,
    start_policy: 'none',
    created_at: new Date(),
  };
}

const stub: CreateTaskFn = (_principal, body) => {
  const b = body as { status: CreateTaskOutcome['status']; outcome: BeginOutcome; throw?: string };
  if (b.throw === 'plain') return Promise.reject(new Error('boom'));
  if (b.throw === 'invalid_request') return Promise.reject(new ValidationError('/title', 'must not be empty'));
  if (b.throw === 'stale_claim' || b.throw === 'capacity_conflict') {
    return Promise.reject(new ConflictError(b.throw, 'refused', { step_id: 's1' }));
  }
  if (b.throw) return Promise.reject(new TaskLedgerError(b.throw as ErrorCode, 'refused', { x: 1 }));
  const task = taskView();
  return Promise.resolve({
    status: b.status,
    outcome: b.outcome,
    task,
    operationId: task.creation_operation_id,
    // Deliberately wrong: the response flags come from the outcome table, not from these.
    deduplicated: false,
    creationComplete: false,
    abortCause: b.status === 'aborted' ? 'step_failed_permanently' : null,
  });
};

const api = useTestApi(t, { createTask: () => stub });

async function create(body: Record<string, unknown>) {
  return call(api.app, 'POST', '/api/v1/tasks', { token: api.adminToken, body });
}

describe('create outcome mapping (companion notes §2 table)', () => {
  it.each([
    ['Created', false, true, true],
    ['FoundSettled', true, true, true],
    ['FoundUnsettled', true, false, true],
    ['CreatedIdentityLost', false, true, false],
  ] as const)(
    '%s -> 200 deduplicated=%s creation_complete=%s external_id present=%s',
    async (outcome, dedup, complete, ext) => {
      const res = await create({ status: 'done', outcome });
      expect(res.status).toBe(200);
      expect(res.body.deduplicated).toBe(dedup);
      expect(res.body.creation_complete).toBe(complete);
      expect('external_id' in res.body.task).toBe(ext);
      if (ext) expect(res.body.task.external_id).toBe('ext-42');
      expect(res.body.operation_id).toBe(res.body.task.creation_operation_id);
    },
  );

  it('pending -> 202 not complete, not deduplicated; aborted -> 422 creation_aborted with the cause', async () => {
    const pending = await create({ status: 'pending', outcome: 'Created' });
    expect(pending.status).toBe(202);
    expect(pending.body).toMatchObject({ deduplicated: false, creation_complete: false });
    expect(pending.body.task.external_id).toBe('ext-42');
    const aborted = await create({ status: 'aborted', outcome: 'Created' });
    expect(aborted.status).toBe(422);
    expect(aborted.body).toMatchObject({ error: 'creation_aborted', cause: 'step_failed_permanently' });
  });

  it.each([
    ['invalid_request', 400, { error: 'invalid_request', detail: { field: '/title', message: 'must not be empty' } }],
    ['invalid_document', 400, { error: 'invalid_document' }],
    ['not_authorized', 404, { error: 'task not created' }],
    ['not_found', 404, { error: 'not_found' }],
    ['task_identity_reused', 409, { error: 'task_identity_reused' }],
    ['creation_state_conflict', 409, { error: 'creation_state_conflict' }],
    ['capacity_conflict', 409, { error: 'capacity_conflict', detail: { step_id: 's1' } }],
    ['stale_claim', 409, { error: 'stale_claim' }],
    ['handle_mismatch', 409, { error: 'handle_mismatch' }],
    ['evidence_mismatch', 409, { error: 'evidence_mismatch' }],
    ['retry_exhausted', 500, { error: 'internal' }],
    ['lock_order_violation', 500, { error: 'internal' }],
    ['plain', 500, { error: 'internal' }],
  ] as const)('a thrown %s is %i', async (code, status, body) => {
    const res = await create({ throw: code });
    expect(res.status).toBe(status);
    expect(res.body).toMatchObject(body);
    if (code === 'not_authorized') expect(res.body).toEqual({ error: 'task not created' });
    if (status === 500) expect(res.body).toEqual({ error: 'internal' });
  });

  it('counts every answer in taskledger_creations_total by outcome', async () => {
    const metrics = await call(api.app, 'GET', '/metrics');
    expect(metrics.status).toBe(200);
    for (const outcome of ['Created', 'FoundSettled', 'FoundUnsettled', 'CreatedIdentityLost', 'pending', 'aborted']) {
      expect(metrics.text).toContain(`taskledger_creations_total{outcome="${outcome}"} 1`);
    }
    expect(metrics.text).toContain('taskledger_creations_total{outcome="error"} 13');
  });
});
