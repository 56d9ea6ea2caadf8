import { describe, expect, it } from 'vitest';
import { validateCompensationProof, validateStepEvidence, validateStepFailure } from '../../src/canonical/validate';
import { EVIDENCE_EFFECTS, STEP_KINDS, type StepKind } from '../../src/domain/vocab';
import { expectInvalid, mutate } from './expect-invalid';
import * as F from './fixtures';

const UPPER_UUID = 'ABCDEF01-2345-4678-89AB-CDEF01234567';
const NEGATIVE = EVIDENCE_EFFECTS.filter((e) => e !== 'present_exact');
const expectationOf = (kind: StepKind) => ({ kind, step_key: F.STEP_KEYS[kind], request_sha256: F.h('9') });

describe('StepEvidence envelope', () => {
  const v = validateStepEvidence;

  it.each(STEP_KINDS)(
    '%s: accepts present_exact with its own observation and every negative effect with the row set',
    (kind) => {
      const ev = F.evidence(kind);
      expect(v(ev, expectationOf(kind))).toBe(ev);
      for (const effect of NEGATIVE) expect(v(F.evidence(kind, effect)).effect).toBe(effect);
    },
  );

  it.each(STEP_KINDS)('%s: rejects an extra field in the envelope and in the observation', (kind) => {
    expectInvalid(() => v(mutate(F.evidence(kind), (e) => (e.worker = 'w1'))), '/worker', 'unknown field "worker"');
    expectInvalid(
      () => v(mutate(F.evidence(kind), (e) => (e.observation.extra = 1))),
      '/observation/extra',
      'unknown field "extra"',
    );
    expectInvalid(
      () => v(mutate(F.evidence(kind, 'conflict'), (e) => (e.observation.extra = 1))),
      '/observation/extra',
      /unknown field/,
    );
  });

  it.each(STEP_KINDS)('%s: rejects a missing field in the envelope and in the observation', (kind) => {
    expectInvalid(
      () => v(mutate(F.evidence(kind), (e) => delete e.observed_at)),
      '/observed_at',
      /missing required field/,
    );
    const obs = F.presentObservation(kind);
    const first = Object.keys(obs)[0] as string;
    expectInvalid(
      () => v(mutate(F.evidence(kind), (e) => delete e.observation[first])),
      `/observation/${first}`,
      /missing/,
    );
  });

  it.each(STEP_KINDS)('%s: rejects another kind’s observation (wrong kind/observation pair)', (kind) => {
    const other = STEP_KINDS[(STEP_KINDS.indexOf(kind) + 1) % STEP_KINDS.length] as StepKind;
    const ev = mutate(F.evidence(kind), (e) => (e.observation = F.presentObservation(other)));
    expect(() => v(ev)).toThrow(/unknown field|missing required field/);
    // A negative effect needs the shared row set, not a per-kind observation, and vice versa.
    expectInvalid(
      () => v(mutate(F.evidence(kind, 'absent_proven'), (e) => (e.observation = F.presentObservation(kind)))),
      '/observation/reason',
      /missing/,
    );
    expect(() => v(mutate(F.evidence(kind), (e) => (e.observation = F.rowSet())))).toThrow(/observation/);
  });

  it('rejects a wrong type, unknown kind and unknown effect', () => {
    expectInvalid(() => v(mutate(F.evidence('launch_intent'), (e) => (e.version = 2))), '/version', 'must be 1');
    expectInvalid(
      () => v(mutate(F.evidence('launch_intent'), (e) => (e.observation = []))),
      '/observation',
      /an object/,
    );
    expectInvalid(() => v(mutate(F.evidence('launch_intent'), (e) => (e.kind = 'deploy'))), '/kind', /must be one of/);
    expectInvalid(
      () => v(mutate(F.evidence('launch_intent'), (e) => (e.effect = 'present'))),
      '/effect',
      /must be one of "present_exact"/,
    );
  });

  it('rejects an uppercase UUID inside an observation', () => {
    const ev = mutate(F.evidence('attachment_claim'), (e) => (e.observation.operation_id = UPPER_UUID));
    expectInvalid(() => v(ev), '/observation/operation_id', 'must be a lowercase RFC 4122 UUID');
  });

  it('pins the constant facts of launch and session observations', () => {
    expectInvalid(
      () => v(mutate(F.evidence('launch_intent'), (e) => (e.observation.dispatched = true))),
      '/observation/dispatched',
      'must be false',
    );
    expectInvalid(
      () => v(mutate(F.evidence('session_prepare'), (e) => (e.observation.runtime_absent = false))),
      '/observation/runtime_absent',
      'must be true',
    );
    expectInvalid(
      () =>
        v(mutate(F.evidence('attachment_claim'), (e) => (e.observation.attachments[0].current_owner_kind = 'staging'))),
      '/observation/attachments/0/current_owner_kind',
      'must be "task"',
    );
  });

  it('rejects unsorted and duplicate observation lists', () => {
    const wa = F.evidence('workspace_attachment');
    expectInvalid(
      () => v(mutate(wa, (e) => e.observation.blocker_rows.reverse())),
      '/observation/blocker_rows/1',
      /sorted by \(task_id, blocker_task_id\)/,
    );
    expectInvalid(
      () => v(mutate(wa, (e) => e.observation.environment_repo_rows.reverse())),
      '/observation/environment_repo_rows/1',
      /sorted by id/,
    );
    const dupMember = mutate(wa, (e) =>
      e.observation.group_member_rows.push({ ...e.observation.group_member_rows[0], role: 'lead' }),
    );
    expectInvalid(() => v(dupMember), '/observation/group_member_rows/1', /duplicate/);
    const ac = F.evidence('attachment_claim');
    expectInvalid(
      () => v(mutate(ac, (e) => (e.observation.attachments[1].attachment_id = F.ID.attachmentA))),
      '/observation/attachments/1',
      /duplicate/,
    );
    const sp = F.evidence('session_prepare');
    expectInvalid(
      () =>
        v(mutate(sp, (e) => e.observation.resource_markers.unshift({ resource_key: 'zz', marker_sha256: F.h('1') }))),
      '/observation/resource_markers/1',
      /sorted/,
    );
    const neg = F.evidence('fresh_branch_prepare', 'conflict');
    expectInvalid(
      () => v(mutate(neg, (e) => e.observation.rows.reverse())),
      '/observation/rows/1',
      /sorted by \(table, key\)/,
    );
    expectInvalid(
      () => v(mutate(neg, (e) => (e.observation.rows[1] = { ...e.observation.rows[0] }))),
      '/observation/rows/1',
      /duplicate/,
    );
  });

  it('requires a real UTC instant with milliseconds', () => {
    for (const bad of [
      '2026-12-02T16:03:12Z',
      '2026-12-02T16:03:12.123+00:00',
      '2026-12-02 16:03:12.123Z',
      '2026-12-02T16:03:12.1234Z',
    ]) {
      expectInvalid(
        () => v(mutate(F.evidence('launch_intent'), (e) => (e.observed_at = bad))),
        '/observed_at',
        /UTC timestamp with milliseconds/,
      );
    }
    for (const impossible of ['2026-02-30T00:00:00.000Z', '2026-13-01T00:00:00.000Z', '2026-01-01T24:00:00.000Z']) {
      expectInvalid(
        () => v(mutate(F.evidence('launch_intent'), (e) => (e.observed_at = impossible))),
        '/observed_at',
        /real UTC instant/,
      );
    }
  });

  it('checks the envelope against the expected step', () => {
    const ev = F.evidence('fresh_branch_prepare');
    const expected = expectationOf('fresh_branch_prepare');
    expectInvalid(() => v(ev, { ...expected, kind: 'session_prepare' }), '/kind', /"session_prepare"/);
    expectInvalid(() => v(ev, { ...expected, step_key: F.ID.session }), '/step_key', /the step's step_key/);
    expectInvalid(() => v(ev, { ...expected, request_sha256: F.h('0') }), '/request_sha256', /request_sha256/);
  });

  it('bounds strings and validates fresh branch proof fields', () => {
    const fb = F.evidence('fresh_branch_prepare');
    expectInvalid(
      () => v(mutate(fb, (e) => (e.observation.head_commit = 'abc'))),
      '/observation/head_commit',
      /full commit ID/,
    );
    expectInvalid(
      () => v(mutate(fb, (e) => (e.observation.registered = 'yes'))),
      '/observation/registered',
      'must be a boolean',
    );
    expectInvalid(
      () => v(mutate(fb, (e) => (e.observation.marker.extra = 1))),
      '/observation/marker/extra',
      /unknown field/,
    );
    expectInvalid(() => v(mutate(fb, (e) => (e.step_key = 'k'.repeat(256)))), '/step_key', /at most 255/);
    expectInvalid(
      () => v(mutate(F.evidence('launch_intent', 'transferred'), (e) => (e.observation.reason = 'r'.repeat(201)))),
      '/observation/reason',
      /at most 200/,
    );
  });
});

describe('StepFailure', () => {
  const v = validateStepFailure;

  it('accepts a permanent failure with absent_proven evidence and a transient one without evidence', () => {
    const f = F.failure();
    expect(v(f, expectationOf('fresh_branch_prepare'))).toBe(f);
    expect(v({ ...F.failure(), class: 'transient', evidence: null }).class).toBe('transient');
    expect(
      v({ ...F.failure(), class: 'ambiguous', evidence: F.evidence('fresh_branch_prepare', 'conflict') }).class,
    ).toBe('ambiguous');
  });

  it('requires absent_proven evidence for a permanent failure', () => {
    expectInvalid(() => v({ ...F.failure(), evidence: null }), '/evidence', /absent_proven/);
    expectInvalid(
      () => v({ ...F.failure(), evidence: F.evidence('fresh_branch_prepare', 'conflict') }),
      '/evidence',
      /absent_proven/,
    );
  });

  it('rejects an extra field, a missing field, a wrong type and an unknown class', () => {
    expectInvalid(() => v({ ...F.failure(), stack: 'x' }), '/stack', 'unknown field "stack"');
    expectInvalid(() => v(mutate(F.failure(), (f) => delete f.evidence)), '/evidence', /missing required field/);
    expectInvalid(() => v({ ...F.failure(), message: 5 }), '/message', 'must be a string');
    expectInvalid(() => v({ ...F.failure(), class: 'fatal' }), '/class', /must be one of "permanent"/);
    expectInvalid(() => v({ ...F.failure(), code: 'Branch-Exists' }), '/code', /snake_case/);
  });

  it('validates nested evidence and its envelope', () => {
    expectInvalid(
      () => v(mutate(F.failure(), (f) => (f.evidence.observation.rows[0].table = 'X'))),
      '/evidence/observation/rows/0/table',
      /snake_case/,
    );
    expectInvalid(
      () => v(mutate(F.failure(), (f) => f.evidence.observation.rows.reverse())),
      '/evidence/observation/rows/1',
      /sorted/,
    );
    expectInvalid(() => v(F.failure(), expectationOf('session_prepare')), '/evidence/kind', /session_prepare/);
  });
});

describe('CompensationProof', () => {
  const v = validateCompensationProof;

  it('accepts a transfer with its cleanup job and a compensation without one', () => {
    const p = F.compensation();
    expect(v(p, expectationOf('workspace_attachment'))).toBe(p);
    expect(v({ ...F.compensation(), outcome: 'compensated', cleanup_job_id: null }).outcome).toBe('compensated');
  });

  it('ties cleanup_job_id to the transferred outcome', () => {
    expectInvalid(() => v({ ...F.compensation(), cleanup_job_id: null }), '/cleanup_job_id', 'must be a string');
    expectInvalid(() => v({ ...F.compensation(), outcome: 'retry_wait' }), '/cleanup_job_id', 'must be null');
  });

  it('rejects an extra field, a missing field, a wrong type, an uppercase UUID and an unknown outcome', () => {
    expectInvalid(() => v({ ...F.compensation(), attempt: 1 }), '/attempt', 'unknown field "attempt"');
    expectInvalid(() => v(mutate(F.compensation(), (p) => delete p.observation)), '/observation', /missing/);
    expectInvalid(() => v({ ...F.compensation(), observation: 'gone' }), '/observation', 'must be an object');
    expectInvalid(
      () => v({ ...F.compensation(), cleanup_job_id: UPPER_UUID }),
      '/cleanup_job_id',
      /lowercase RFC 4122/,
    );
    expectInvalid(() => v({ ...F.compensation(), outcome: 'done' }), '/outcome', /must be one of "compensated"/);
  });

  it('rejects unsorted or duplicate rows and checks the expected step', () => {
    expectInvalid(
      () => v(mutate(F.compensation(), (p) => p.observation.rows.reverse())),
      '/observation/rows/1',
      /sorted/,
    );
    expectInvalid(
      () => v(F.compensation(), { ...expectationOf('workspace_attachment'), step_key: F.h('c') }),
      '/step_key',
      /the step's step_key/,
    );
  });
});
