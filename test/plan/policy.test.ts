import { describe, expect, it } from 'vitest';
import { ValidationError } from '../../src/domain/errors';
import { resolveStartPolicy } from '../../src/plan/start-policy';
import { resolveWorkspacePolicy, type WorkspacePolicyInput } from '../../src/plan/workspace-policy';
import {
  BLOCKER_1,
  BLOCKER_2,
  ENV,
  GROUP,
  PARENT,
  PARENT_ENV,
  PARENT_GROUP,
  REPO_A,
  REPO_B,
  REPO_C,
  TASK,
  WS,
  catchError,
} from './fixtures';

describe('resolveStartPolicy', () => {
  it('is none without start_agent, with or without blockers', () => {
    expect(resolveStartPolicy(false, [])).toBe('none');
    expect(resolveStartPolicy(false, [BLOCKER_1])).toBe('none');
  });
  it('is immediate with start_agent and no blockers', () => {
    expect(resolveStartPolicy(true, [])).toBe('immediate');
  });
  it('is deferred with start_agent and any blocker', () => {
    expect(resolveStartPolicy(true, [BLOCKER_1])).toBe('deferred');
    expect(resolveStartPolicy(true, [BLOCKER_1, BLOCKER_2])).toBe('deferred');
  });
});

function input(overrides: Partial<WorkspacePolicyInput> = {}): WorkspacePolicyInput {
  return {
    taskId: TASK,
    workspaceId: WS,
    parentId: null,
    policy: null,
    parent: null,
    blockedBy: [],
    environments: {
      [ENV]: { id: ENV, repository_ids: [REPO_B, REPO_A] },
      [PARENT_ENV]: { id: PARENT_ENV, repository_ids: [REPO_C] },
    },
    groups: [GROUP, PARENT_GROUP],
    ...overrides,
  };
}

const withParent = (group: string | null, env: string | null): Partial<WorkspacePolicyInput> => ({
  parentId: PARENT,
  parent: { id: PARENT, group_id: group, environment_id: env },
});

describe('resolveWorkspacePolicy', () => {
  it('selects no step when unbound and unblocked', () => {
    expect(resolveWorkspacePolicy(input())).toBeNull();
  });

  it('defaults to inherit_parent with a parent and takes its group and environment', () => {
    expect(resolveWorkspacePolicy(input(withParent(PARENT_GROUP, PARENT_ENV)))).toEqual({
      task_id: TASK,
      workspace_id: WS,
      parent_id: PARENT,
      mode: 'inherit_parent',
      group_id: PARENT_GROUP,
      member_ids: [TASK],
      blocker_ids: [],
      environment_id: PARENT_ENV,
      repository_ids: [REPO_C],
    });
  });

  it('inherits a group-only or environment-only parent binding', () => {
    const g = resolveWorkspacePolicy(input(withParent(PARENT_GROUP, null)));
    expect(g).toMatchObject({ group_id: PARENT_GROUP, member_ids: [TASK], environment_id: null, repository_ids: [] });
    const e = resolveWorkspacePolicy(
      input({ ...withParent(null, ENV), policy: { mode: 'inherit_parent', group_id: null, environment_id: null } }),
    );
    expect(e).toMatchObject({
      mode: 'inherit_parent',
      group_id: null,
      member_ids: [],
      environment_id: ENV,
      repository_ids: [REPO_A, REPO_B],
    });
  });

  it('selects nothing for a parent without a binding', () => {
    expect(resolveWorkspacePolicy(input(withParent(null, null)))).toBeNull();
  });

  it('rejects inherit_parent without a parent', () => {
    const err = catchError(() =>
      resolveWorkspacePolicy(input({ policy: { mode: 'inherit_parent', group_id: null, environment_id: null } })),
    );
    expect(err).toBeInstanceOf(ValidationError);
    expect(err.field).toBe('/workspace_policy/mode');
  });

  it('rejects a parent that is missing from the context', () => {
    expect(catchError(() => resolveWorkspacePolicy(input({ parentId: PARENT }))).field).toBe('/parent_id');
  });

  it('shared_group binds an explicit group, environment or both', () => {
    const g = resolveWorkspacePolicy(
      input({ policy: { mode: 'shared_group', group_id: GROUP, environment_id: null } }),
    );
    expect(g).toMatchObject({
      mode: 'shared_group',
      group_id: GROUP,
      member_ids: [TASK],
      environment_id: null,
      parent_id: null,
    });
    const e = resolveWorkspacePolicy(input({ policy: { mode: 'shared_group', group_id: null, environment_id: ENV } }));
    expect(e).toMatchObject({ group_id: null, member_ids: [], environment_id: ENV, repository_ids: [REPO_A, REPO_B] });
    const both = resolveWorkspacePolicy(
      input({
        ...withParent(PARENT_GROUP, null),
        policy: { mode: 'shared_group', group_id: GROUP, environment_id: ENV },
      }),
    );
    expect(both).toMatchObject({ parent_id: PARENT, group_id: GROUP, environment_id: ENV });
  });

  it('shared_group requires a binding', () => {
    const err = catchError(() =>
      resolveWorkspacePolicy(input({ policy: { mode: 'shared_group', group_id: null, environment_id: null } })),
    );
    expect(err.field).toBe('/workspace_policy');
  });

  it('new_workspace selects the step only for an explicit binding', () => {
    expect(
      resolveWorkspacePolicy(input({ policy: { mode: 'new_workspace', group_id: null, environment_id: null } })),
    ).toBeNull();
    expect(
      resolveWorkspacePolicy(
        input({
          ...withParent(PARENT_GROUP, PARENT_ENV),
          policy: { mode: 'new_workspace', group_id: null, environment_id: null },
        }),
      ),
    ).toBeNull();
    expect(
      resolveWorkspacePolicy(input({ policy: { mode: 'new_workspace', group_id: GROUP, environment_id: null } })),
    ).toMatchObject({
      mode: 'new_workspace',
      group_id: GROUP,
      member_ids: [TASK],
    });
  });

  it('selects the step for blockers alone (unbound → new_workspace with no binding)', () => {
    expect(resolveWorkspacePolicy(input({ blockedBy: [BLOCKER_2, BLOCKER_1] }))).toEqual({
      task_id: TASK,
      workspace_id: WS,
      parent_id: null,
      mode: 'new_workspace',
      group_id: null,
      member_ids: [],
      blocker_ids: [BLOCKER_1, BLOCKER_2],
      environment_id: null,
      repository_ids: [],
    });
  });

  it('keeps a resolved mode when blockers select the step', () => {
    expect(resolveWorkspacePolicy(input({ ...withParent(null, null), blockedBy: [BLOCKER_1] }))).toMatchObject({
      mode: 'inherit_parent',
      parent_id: PARENT,
      group_id: null,
      blocker_ids: [BLOCKER_1],
    });
  });

  it('rejects unknown groups and environments with the field that named them', () => {
    const other = '77777777-0000-4000-8000-000000000001';
    expect(
      catchError(() =>
        resolveWorkspacePolicy(input({ policy: { mode: 'shared_group', group_id: other, environment_id: null } })),
      ).field,
    ).toBe('/workspace_policy/group_id');
    expect(
      catchError(() =>
        resolveWorkspacePolicy(input({ policy: { mode: 'shared_group', group_id: null, environment_id: other } })),
      ).field,
    ).toBe('/workspace_policy/environment_id');
    expect(catchError(() => resolveWorkspacePolicy(input(withParent(other, null)))).field).toBe('/parent_id');
  });
});
