import { describe, expect, it } from 'vitest';
import { createRequestHash } from '../../src/canonical/hash';
import { ValidationError } from '../../src/domain/errors';
import { validateCreateRequest, validatedRequestDocument } from '../../src/plan/create-request';
import {
  ATT_1,
  ATT_2,
  BLOCKER_1,
  BLOCKER_2,
  CONN_GH,
  CONN_GL,
  ENV,
  GROUP,
  PARENT,
  REPO_A,
  REPO_B,
  TASK,
  WS,
  catchError,
} from './fixtures';

const base = { workspace_id: WS, title: 'Fix the flaky test' };

function invalid(body: unknown): { code: string; field: string; message: string } {
  const err = catchError(() => validateCreateRequest(body));
  expect(err).toBeInstanceOf(ValidationError);
  return err;
}

function expectInvalid(body: unknown, field: string, message?: RegExp, code = 'invalid_request'): void {
  const err = invalid(body);
  expect({ field: err.field, code: err.code }).toEqual({ field, code });
  if (message) expect(err.message).toMatch(message);
}

describe('validateCreateRequest: normalization', () => {
  it('fills every optional with its default', () => {
    expect(validateCreateRequest(base)).toEqual({
      workspace_id: WS,
      title: 'Fix the flaky test',
      description: null,
      external_id: null,
      task_id: null,
      workflow_step_id: null,
      parent_id: null,
      blocked_by: [],
      start_agent: false,
      agent_profile_id: null,
      repositories: [],
      attachments: [],
      contributions: [],
      workspace_policy: null,
    });
  });

  it('trims the title and keeps the description verbatim', () => {
    const req = validateCreateRequest({ ...base, title: '  Hello  ', description: '  body\n' });
    expect(req.title).toBe('Hello');
    expect(req.description).toBe('  body\n');
  });

  it('normalizes the external ID', () => {
    expect(validateCreateRequest({ ...base, external_id: '  Ticket-7 ' }).external_id).toBe('Ticket-7');
    expect(validateCreateRequest({ ...base, external_id: '   ' }).external_id).toBeNull();
  });

  it('deduplicates and sorts blocked_by and attachments', () => {
    const req = validateCreateRequest({
      ...base,
      blocked_by: [BLOCKER_2, BLOCKER_1, BLOCKER_2],
      attachments: [ATT_2, ATT_1, ATT_1],
    });
    expect(req.blocked_by).toEqual([BLOCKER_1, BLOCKER_2]);
    expect(req.attachments).toEqual([ATT_1, ATT_2]);
  });

  it('keeps repository order and defaults fresh_branch to true and base_branch to null', () => {
    const req = validateCreateRequest({
      ...base,
      repositories: [
        { repository_id: REPO_B, base_branch: 'release/1.2' },
        { repository_id: REPO_A, fresh_branch: false },
      ],
    });
    expect(req.repositories).toEqual([
      { repository_id: REPO_B, base_branch: 'release/1.2', fresh_branch: true },
      { repository_id: REPO_A, base_branch: null, fresh_branch: false },
    ]);
  });

  it('normalizes a numeric contribution ID to its decimal string and sorts contributions by step key', () => {
    const req = validateCreateRequest({
      ...base,
      contributions: [
        {
          provider: 'gitlab',
          connection_id: CONN_GL,
          repository_id: REPO_A,
          contribution_kind: 'merge_request',
          contribution_id: 7,
        },
        {
          provider: 'github',
          connection_id: CONN_GH,
          repository_id: REPO_B,
          contribution_kind: 'pull_request',
          contribution_id: '12',
        },
      ],
    });
    expect(req.contributions.map((c) => `${c.provider}:${c.contribution_id}`)).toEqual(['github:12', 'gitlab:7']);
  });

  it('accepts null for every optional field (the validated document validates again to the same request)', () => {
    const req = validateCreateRequest({
      ...base,
      description: 'd',
      external_id: 'X-1',
      task_id: TASK,
      parent_id: PARENT,
      blocked_by: [BLOCKER_1],
      start_agent: true,
      repositories: [{ repository_id: REPO_A }],
      attachments: [ATT_1],
      contributions: [
        {
          provider: 'github',
          connection_id: CONN_GH,
          repository_id: REPO_A,
          contribution_kind: 'pull_request',
          contribution_id: 3,
        },
      ],
      workspace_policy: { mode: 'shared_group', group_id: GROUP },
    });
    const doc = validatedRequestDocument(req);
    expect(validateCreateRequest(JSON.parse(JSON.stringify(doc)))).toEqual(req);
    expect(validateCreateRequest({ ...base, description: null, task_id: null, workspace_policy: null })).toEqual(
      validateCreateRequest(base),
    );
  });

  it('makes the request hash depend on every field, including order-insensitive lists only by content', () => {
    const h = (body: Record<string, unknown>): string =>
      createRequestHash(validatedRequestDocument(validateCreateRequest({ ...base, ...body })));
    expect(h({ blocked_by: [BLOCKER_1, BLOCKER_2] })).toBe(h({ blocked_by: [BLOCKER_2, BLOCKER_1, BLOCKER_1] }));
    expect(h({ title: ' t ' })).toBe(h({ title: 't' }));
    const variants = [
      {},
      { title: 'other' },
      { description: '' },
      { external_id: 'a' },
      { external_id: 'A' },
      { start_agent: true },
    ];
    expect(new Set(variants.map(h)).size).toBe(variants.length);
  });
});

describe('validateCreateRequest: rejections', () => {
  it.each([[[]], ['text'], [null], [42], [undefined]])('rejects a non-object body %j', (body) => {
    expectInvalid(body, '/', /request body must be a JSON object/);
  });

  it('rejects an unknown top-level field with its pointer', () => {
    expectInvalid({ ...base, foo: 1 }, '/foo', /unknown field "foo"/);
  });

  it('rejects unknown nested fields with their pointers', () => {
    expectInvalid(
      { ...base, repositories: [{ repository_id: REPO_A }, { repository_id: REPO_B, branch: 'x' }] },
      '/repositories/1/branch',
      /unknown field "branch"/,
    );
    expectInvalid(
      { ...base, workspace_policy: { mode: 'new_workspace', extra: true } },
      '/workspace_policy/extra',
      /unknown field/,
    );
    expectInvalid(
      {
        ...base,
        contributions: [
          {
            provider: 'github',
            connection_id: CONN_GH,
            repository_id: REPO_A,
            contribution_kind: 'pull_request',
            contribution_id: '1',
            url: 'x',
          },
        ],
      },
      '/contributions/0/url',
    );
  });

  it('rejects missing required fields', () => {
    expectInvalid({ workspace_id: WS }, '/title', /required field "title" is missing/);
    expectInvalid({ ...base, repositories: [{ fresh_branch: true }] }, '/repositories/0/repository_id', /missing/);
    expectInvalid({ ...base, workspace_policy: {} }, '/workspace_policy/mode', /missing/);
  });

  it('rejects wrong types with the field pointer', () => {
    expectInvalid({ ...base, title: 5 }, '/title', /must be a string/);
    expectInvalid({ ...base, start_agent: 'yes' }, '/start_agent', /must be a boolean/);
    expectInvalid({ ...base, blocked_by: BLOCKER_1 }, '/blocked_by', /must be an array/);
    expectInvalid(
      { ...base, repositories: [{ repository_id: REPO_A, fresh_branch: 1 }] },
      '/repositories/0/fresh_branch',
    );
    expectInvalid({ ...base, description: 3 }, '/description', /string or null/);
    expectInvalid({ ...base, workspace_policy: 'shared' }, '/workspace_policy', /an object or null/);
  });

  it('rejects bad UUIDs, uppercase with a clear message', () => {
    expectInvalid({ ...base, workspace_id: 'not-a-uuid' }, '/workspace_id', /lowercase RFC 4122 UUID/);
    expectInvalid({ ...base, parent_id: PARENT.toUpperCase() }, '/parent_id', /uppercase hex digits are not accepted/);
    expectInvalid({ ...base, blocked_by: [BLOCKER_1, 'x'] }, '/blocked_by/1', /UUID/);
    expectInvalid(
      { ...base, repositories: [{ repository_id: REPO_A }, { repository_id: '00000000-0000-0000-0000-000000000000' }] },
      '/repositories/1/repository_id',
    );
    expectInvalid({ ...base, attachments: [ATT_1.replace(/-/g, '')] }, '/attachments/0');
  });

  it('rejects an empty, blank or over-long title', () => {
    expectInvalid({ ...base, title: '' }, '/title', /empty/);
    expectInvalid({ ...base, title: '   ' }, '/title', /empty/);
    expect(validateCreateRequest({ ...base, title: 'é'.repeat(500) }).title).toHaveLength(500);
    expectInvalid({ ...base, title: 'x'.repeat(501) }, '/title', /at most 500/);
    expectInvalid({ ...base, title: 'a\nb' }, '/title', /control/);
  });

  it('limits the description to 64 KiB of UTF-8', () => {
    expect(validateCreateRequest({ ...base, description: 'x'.repeat(65536) }).description).toHaveLength(65536);
    expectInvalid({ ...base, description: 'x'.repeat(65537) }, '/description', /65536/);
    expectInvalid({ ...base, description: 'é'.repeat(32769) }, '/description', /got 65538/);
    expectInvalid({ ...base, description: 'a\u0000b' }, '/description', /NUL/);
  });

  it('validates the external ID first, with its own code', () => {
    expectInvalid({ ...base, external_id: '\tX', foo: 1 }, '/external_id', /control/, 'invalid_external_id');
    expectInvalid({ ...base, external_id: 7 }, '/external_id', /string/, 'invalid_external_id');
  });

  it('rejects a duplicate repository with the pointer of the second one', () => {
    expectInvalid(
      {
        ...base,
        repositories: [
          { repository_id: REPO_A },
          { repository_id: REPO_B },
          { repository_id: REPO_A, fresh_branch: false },
        ],
      },
      '/repositories/2/repository_id',
      /duplicate repository.*\/repositories\/0/,
    );
  });

  it('rejects an unsafe base branch', () => {
    expectInvalid(
      { ...base, repositories: [{ repository_id: REPO_A, base_branch: '../evil' }] },
      '/repositories/0/base_branch',
      /Git branch/,
    );
    expectInvalid(
      { ...base, repositories: [{ repository_id: REPO_A, base_branch: '' }] },
      '/repositories/0/base_branch',
    );
  });

  const gh = {
    provider: 'github',
    connection_id: CONN_GH,
    repository_id: REPO_A,
    contribution_kind: 'pull_request',
    contribution_id: '5',
  };

  it('rejects a provider/kind mismatch', () => {
    expectInvalid(
      { ...base, contributions: [{ ...gh, contribution_kind: 'merge_request' }] },
      '/contributions/0/contribution_kind',
      /github contribution must be a pull_request/,
    );
    expectInvalid(
      { ...base, contributions: [gh, { ...gh, provider: 'gitlab', connection_id: CONN_GL }] },
      '/contributions/1/contribution_kind',
      /gitlab contribution must be a merge_request/,
    );
    expectInvalid(
      { ...base, contributions: [{ ...gh, provider: 'bitbucket' }] },
      '/contributions/0/provider',
      /one of/,
    );
  });

  it('rejects duplicate contributions, also when one ID is numeric', () => {
    expectInvalid(
      { ...base, contributions: [gh, { ...gh, repository_id: REPO_B }] },
      '/contributions/1',
      /duplicate contribution/,
    );
    expectInvalid({ ...base, contributions: [gh, { ...gh, contribution_id: 5 }] }, '/contributions/1', /duplicate/);
  });

  it('rejects bad contribution IDs', () => {
    for (const bad of [0, -1, 1.5, '', ' 5', 'a\tb', 'x'.repeat(198)]) {
      expect(invalid({ ...base, contributions: [{ ...gh, contribution_id: bad }] }).field).toBe(
        '/contributions/0/contribution_id',
      );
    }
    expect(
      validateCreateRequest({ ...base, contributions: [{ ...gh, contribution_id: 'x'.repeat(197) }] }).contributions,
    ).toHaveLength(1);
  });

  it('rejects self-references when the task ID is given', () => {
    expectInvalid({ ...base, task_id: TASK, parent_id: TASK }, '/parent_id', /own parent/);
    expectInvalid({ ...base, task_id: TASK, blocked_by: [BLOCKER_1, TASK] }, '/blocked_by/1', /block itself/);
  });

  it('checks the static workspace-policy rules', () => {
    expectInvalid(
      { ...base, workspace_policy: { mode: 'inherit_parent' } },
      '/workspace_policy/mode',
      /requires parent_id/,
    );
    expectInvalid(
      { ...base, parent_id: PARENT, workspace_policy: { mode: 'inherit_parent', group_id: GROUP } },
      '/workspace_policy/group_id',
    );
    expectInvalid(
      { ...base, workspace_policy: { mode: 'shared_group' } },
      '/workspace_policy',
      /group_id and\/or environment_id/,
    );
    expectInvalid({ ...base, workspace_policy: { mode: 'solo' } }, '/workspace_policy/mode', /one of/);
    expect(
      validateCreateRequest({ ...base, workspace_policy: { mode: 'shared_group', environment_id: ENV } })
        .workspace_policy,
    ).toEqual({
      mode: 'shared_group',
      group_id: null,
      environment_id: ENV,
    });
  });

  it('rejects lone surrogates anywhere', () => {
    expectInvalid({ ...base, description: 'a\udc00' }, '/description', /well-formed/);
  });
});
