import { describe, expect, it } from 'vitest';
import { validateStepRequest } from '../../src/canonical/validate';
import { STEP_KINDS, type StepKind } from '../../src/domain/vocab';
import { expectInvalid, mutate } from './expect-invalid';
import * as F from './fixtures';

const UPPER_UUID = 'ABCDEF01-2345-4678-89AB-CDEF01234567';

describe('step request schemas: rules shared by every kind', () => {
  it.each(STEP_KINDS)('%s: the fixture is valid and returned unchanged', (kind) => {
    const req = F.request(kind);
    expect(validateStepRequest(kind, req)).toBe(req);
    expect(req).toEqual(F.request(kind));
  });

  it.each(STEP_KINDS)('%s: rejects an extra field', (kind) => {
    const req = mutate(F.request(kind), (r) => (r.foo = null));
    expectInvalid(() => validateStepRequest(kind, req), '/foo', 'unknown field "foo"');
  });

  it.each(STEP_KINDS)('%s: rejects a missing field', (kind) => {
    const req = mutate(F.request(kind), (r) => delete r.workspace_id);
    expectInvalid(() => validateStepRequest(kind, req), '/workspace_id', /missing required field "workspace_id"/);
  });

  it.each(STEP_KINDS)('%s: rejects a wrong type', (kind) => {
    const req = mutate(F.request(kind), (r) => (r.task_id = 42));
    expectInvalid(() => validateStepRequest(kind, req), '/task_id', 'must be a string');
  });

  it.each(STEP_KINDS)('%s: rejects an uppercase UUID', (kind) => {
    const req = mutate(F.request(kind), (r) => (r.workspace_id = UPPER_UUID));
    expectInvalid(() => validateStepRequest(kind, req), '/workspace_id', 'must be a lowercase RFC 4122 UUID');
  });

  it.each(STEP_KINDS)('%s: rejects a UUID that is not RFC 4122 (version 0, NCS variant)', (kind) => {
    for (const bad of [
      '11111111-1111-0111-8111-111111111111',
      '11111111-1111-4111-7111-111111111111',
      '1111111111114111811111111111111',
    ]) {
      const req = mutate(F.request(kind), (r) => (r.task_id = bad));
      expectInvalid(() => validateStepRequest(kind, req), '/task_id', /RFC 4122/);
    }
  });

  it.each(STEP_KINDS)('%s: rejects a non-object', (kind) => {
    expectInvalid(() => validateStepRequest(kind, [F.request(kind)]), '', 'must be an object');
    expectInvalid(() => validateStepRequest(kind, null), '', 'must be an object');
  });

  it('rejects an unknown kind', () => {
    expectInvalid(() => validateStepRequest('provider_pr_association' as StepKind, {}), '/kind', /unknown step kind/);
    expectInvalid(() => validateStepRequest('toString' as StepKind, {}), '/kind', /unknown step kind/);
  });

  it('rejects a request of another kind (wrong kind/request pair)', () => {
    expectInvalid(
      () => validateStepRequest('launch_intent', F.request('session_prepare')),
      '/task_environment_id',
      /unknown field/,
    );
    expectInvalid(
      () => validateStepRequest('session_prepare', F.request('launch_intent')),
      '/task_environment_id',
      /missing/,
    );
  });
});

describe('workspace_attachment request', () => {
  const v = (r: unknown) => validateStepRequest('workspace_attachment', r);

  it('requires absent optionals as null, never omitted', () => {
    expectInvalid(() => v(mutate(F.request('workspace_attachment'), (r) => delete r.group_id)), '/group_id', /null/);
    expect(
      v(mutate(F.request('workspace_attachment'), (r) => ((r.group_id = null), (r.member_ids = [])))),
    ).toBeTruthy();
  });

  it.each(['member_ids', 'blocker_ids', 'repository_ids'])('rejects an unsorted %s', (prop) => {
    const r = mutate(F.request('workspace_attachment'), (d) => (d[prop] = [F.ID.repoB, F.ID.repoA]));
    expectInvalid(() => v(r), `/${prop}/1`, /must be sorted/);
  });

  it.each(['member_ids', 'blocker_ids', 'repository_ids'])('rejects duplicate %s', (prop) => {
    const r = mutate(F.request('workspace_attachment'), (d) => (d[prop] = [F.ID.repoA, F.ID.repoA]));
    expectInvalid(() => v(r), `/${prop}/1`, /duplicate/);
  });

  it('rejects an unknown mode', () => {
    expectInvalid(
      () => v(mutate(F.request('workspace_attachment'), (r) => (r.mode = 'shared'))),
      '/mode',
      /must be one of "inherit_parent"/,
    );
  });

  it('rejects inconsistent policy fields', () => {
    const base = F.request('workspace_attachment');
    expectInvalid(() => v(mutate(base, (r) => (r.group_id = null))), '/member_ids', /need a group_id/);
    expectInvalid(() => v(mutate(base, (r) => (r.environment_id = null))), '/repository_ids', /need an environment_id/);
    expectInvalid(
      () => v(mutate(base, (r) => ((r.mode = 'inherit_parent'), (r.parent_id = null)))),
      '/parent_id',
      /inherit_parent/,
    );
    expectInvalid(() => v(mutate(base, (r) => (r.parent_id = r.task_id))), '/parent_id', /own parent/);
    expectInvalid(() => v(mutate(base, (r) => (r.blocker_ids = [F.ID.task]))), '/blocker_ids/0', /block itself/);
  });
});

describe('attachment_claim request', () => {
  const v = (r: unknown) => validateStepRequest('attachment_claim', r);
  const base = F.request('attachment_claim');

  it('rejects attachments unsorted or duplicated by attachment_id', () => {
    expectInvalid(() => v(mutate(base, (r) => r.attachments.reverse())), '/attachments/1', /sorted by attachment_id/);
    expectInvalid(
      () => v(mutate(base, (r) => (r.attachments[1].attachment_id = F.ID.attachmentA))),
      '/attachments/1',
      /duplicate/,
    );
  });

  it('rejects an empty attachment set (one claim step per nonempty set)', () => {
    expectInvalid(() => v(mutate(base, (r) => (r.attachments = []))), '/attachments', /at least 1/);
  });

  it('rejects a bad item: extra field, negative or fractional size, bad hash, missing owner', () => {
    expectInvalid(
      () => v(mutate(base, (r) => (r.attachments[0].name = 'a.png'))),
      '/attachments/0/name',
      'unknown field "name"',
    );
    expectInvalid(() => v(mutate(base, (r) => (r.attachments[0].size = -1))), '/attachments/0/size', /must be >= 0/);
    expectInvalid(() => v(mutate(base, (r) => (r.attachments[0].size = 1.5))), '/attachments/0/size', /integer/);
    expectInvalid(() => v(mutate(base, (r) => (r.attachments[0].size = 2 ** 53))), '/attachments/0/size', /<=/);
    expectInvalid(
      () => v(mutate(base, (r) => (r.attachments[1].content_sha256 = F.h('A')))),
      '/attachments/1/content_sha256',
      /64 lowercase hex/,
    );
    expectInvalid(
      () => v(mutate(base, (r) => delete r.attachments[0].staging_owner_id)),
      '/attachments/0/staging_owner_id',
      /missing/,
    );
    expectInvalid(
      () => v(mutate(base, (r) => (r.attachments[0].staging_owner_id = ''))),
      '/attachments/0/staging_owner_id',
      /empty/,
    );
  });
});

describe('fresh_branch_prepare request', () => {
  const v = (r: unknown) => validateStepRequest('fresh_branch_prepare', r);
  const base = F.request('fresh_branch_prepare');

  it.each(['main', 'feature/x-1', 'v1.2.3', 'a_b', 'task/1111/fix.login', 'a'])('accepts branch %s', (branch) => {
    expect(v(mutate(base, (r) => (r.branch = branch))).branch).toBe(branch);
  });

  it.each([
    '',
    'a..b',
    'a.lock',
    'a.lock/b',
    '-x',
    '.hidden',
    'a/.b',
    'a.',
    'a b',
    '/a',
    'a/',
    'a//b',
    'HEAD',
    'a~1',
    'a^',
    'a:b',
    'a?',
    'a*',
    'a[b',
    'a\\b',
    'a@{1}',
    'ü',
    'x'.repeat(256),
  ])('rejects branch %j', (branch) => {
    expectInvalid(() => v(mutate(base, (r) => (r.branch = branch))), '/branch');
  });

  it('accepts 40- and 64-hex commits only', () => {
    expect(v(mutate(base, (r) => (r.base_commit = 'a'.repeat(64)))).base_commit).toHaveLength(64);
    for (const bad of ['a'.repeat(39), 'a'.repeat(41), 'a'.repeat(63), 'A'.repeat(40), 'g'.repeat(40)]) {
      expectInvalid(() => v(mutate(base, (r) => (r.base_commit = bad))), '/base_commit', /full commit ID/);
    }
  });

  it('bounds resource_key and forbids control characters', () => {
    expectInvalid(() => v(mutate(base, (r) => (r.resource_key = 'k'.repeat(256)))), '/resource_key', /at most 255/);
    expectInvalid(() => v(mutate(base, (r) => (r.resource_key = 'a\nb'))), '/resource_key', /control characters/);
  });
});

describe('remote_contribution_associate request', () => {
  const v = (r: unknown) => validateStepRequest('remote_contribution_associate', r);
  const base = F.request('remote_contribution_associate');

  it('pairs github with pull_request and gitlab with merge_request', () => {
    expect(v(mutate(base, (r) => ((r.provider = 'gitlab'), (r.contribution_kind = 'merge_request')))).provider).toBe(
      'gitlab',
    );
    expectInvalid(
      () => v(mutate(base, (r) => (r.contribution_kind = 'merge_request'))),
      '/contribution_kind',
      'must be "pull_request"',
    );
    expectInvalid(
      () => v(mutate(base, (r) => (r.provider = 'gitlab'))),
      '/contribution_kind',
      'must be "merge_request"',
    );
  });

  it('rejects an unknown provider or contribution kind', () => {
    expectInvalid(
      () => v(mutate(base, (r) => (r.provider = 'bitbucket'))),
      '/provider',
      /must be one of "github", "gitlab"/,
    );
    expectInvalid(
      () => v(mutate(base, (r) => (r.contribution_kind = 'patch'))),
      '/contribution_kind',
      /must be one of/,
    );
  });

  it('rejects an empty contribution_id', () => {
    expectInvalid(() => v(mutate(base, (r) => (r.contribution_id = ''))), '/contribution_id', /empty/);
  });
});

describe('session_prepare and launch_intent requests', () => {
  it('session_prepare rejects unsorted or duplicate resource_keys', () => {
    const base = F.request('session_prepare');
    const v = (r: unknown) => validateStepRequest('session_prepare', r);
    expectInvalid(() => v(mutate(base, (r) => (r.resource_keys = ['b', 'a']))), '/resource_keys/1', /sorted/);
    expectInvalid(() => v(mutate(base, (r) => (r.resource_keys = ['a', 'a']))), '/resource_keys/1', /duplicate/);
    // UTF-16 code-unit order: 'B' (0x42) < 'a' (0x61).
    expect(v(mutate(base, (r) => (r.resource_keys = ['B', 'a']))).resource_keys).toEqual(['B', 'a']);
    expectInvalid(() => v(mutate(base, (r) => (r.executor_id = 'x'.repeat(101)))), '/executor_id', /at most 100/);
  });

  it('launch_intent rejects a bad launch_config_sha256 and an uppercase session UUID', () => {
    const base = F.request('launch_intent');
    const v = (r: unknown) => validateStepRequest('launch_intent', r);
    expectInvalid(() => v(mutate(base, (r) => (r.launch_config_sha256 = 'abc'))), '/launch_config_sha256', /SHA-256/);
    expectInvalid(
      () => v(mutate(base, (r) => (r.session_id = r.session_id.toUpperCase()))),
      '/session_id',
      /lowercase/,
    );
  });
});
