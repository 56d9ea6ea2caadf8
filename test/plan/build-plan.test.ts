import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { canonicalJson } from '../../src/canonical/canonical-json';
import { createRequestHash, domainHash, manifestHash, rowHash } from '../../src/canonical/hash';
import type { CreationPlan, PlanStep, StepRequestByKind } from '../../src/canonical/types';
import { validateCreationPlan } from '../../src/canonical/validate';
import { ValidationError } from '../../src/domain/errors';
import type { StepKind } from '../../src/domain/vocab';
import { buildCreationPlan } from '../../src/plan/build-plan';
import { validatedRequestDocument } from '../../src/plan/create-request';
import type { PlanContext } from '../../src/plan/plan-types';
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
  PARENT_ENV,
  PARENT_GROUP,
  PROFILE,
  REPO_A,
  REPO_B,
  REPO_C,
  SHA_A,
  TASK,
  WORKFLOW,
  WORKFLOW_STEP,
  WS,
  catchError,
  context,
  countByKind,
  idSeq,
  request,
  uuid,
} from './fixtures';

const ID = (n: number): string => uuid('9', n);

function build(body: Record<string, unknown> = {}, ctx: Partial<PlanContext> = {}) {
  return buildCreationPlan(request(body), context(ctx));
}

function only<K extends StepKind>(plan: CreationPlan, kind: K): { step_key: string; request: StepRequestByKind[K] } {
  const steps = plan.steps.filter((s) => s.kind === kind);
  expect(steps).toHaveLength(1);
  return steps[0] as unknown as { step_key: string; request: StepRequestByKind[K] };
}

function ofKind<K extends StepKind>(
  plan: CreationPlan,
  kind: K,
): { step_key: string; request: StepRequestByKind[K] }[] {
  return plan.steps.filter((s) => s.kind === kind) as unknown as { step_key: string; request: StepRequestByKind[K] }[];
}

const NO_STEPS = {
  workspace_attachment: 0,
  attachment_claim: 0,
  fresh_branch_prepare: 0,
  remote_contribution_associate: 0,
  session_prepare: 0,
  launch_intent: 0,
};
const policyKey = (r: StepRequestByKind['workspace_attachment']): string =>
  domainHash(
    'kandev/task-creation-workspace-policy/v1',
    canonicalJson({
      mode: r.mode,
      group_id: r.group_id,
      environment_id: r.environment_id,
      member_ids: r.member_ids,
      blocker_ids: r.blocker_ids,
    }),
  );

describe('buildCreationPlan: start policy cardinality', () => {
  it('none: no steps, no environment, no session', () => {
    const built = build();
    expect(built.plan).toMatchObject({
      version: 1,
      task_id: TASK,
      workspace_id: WS,
      workflow_id: WORKFLOW,
      workflow_step_id: WORKFLOW_STEP,
      parent_id: null,
      start_policy: 'none',
      deferred_launch: null,
      steps: [],
    });
    expect(built.sessionId).toBeNull();
    expect(built.rows.task_environments).toEqual([]);
    expect(built.plan.database_rows.map((r) => r.table)).toEqual(['task_identities', 'tasks']);
    expect(built.plan.request_sha256).toBe(createRequestHash(validatedRequestDocument(request())));
  });

  it('immediate: exactly one session_prepare and one launch_intent keyed by the session UUID', () => {
    const built = build({ start_agent: true, agent_profile_id: PROFILE });
    expect(countByKind(built.plan)).toEqual({ ...NO_STEPS, session_prepare: 1, launch_intent: 1 });
    const sessionId = ID(1); // drawn first
    const envId = ID(2);
    expect(built.sessionId).toBe(sessionId);
    expect(built.rows.task_environments).toEqual([{ id: envId, workspace_id: WS, task_id: TASK, kind: 'task' }]);
    const launchConfig = domainHash(
      'kandev/task-launch-config/v1',
      canonicalJson({
        agent_profile_id: PROFILE,
        executor: { kind: 'local', command: ['agent', '--yes'] },
        session_id: sessionId,
        task_id: TASK,
        task_environment_id: envId,
      }),
    );
    const session = only(built.plan, 'session_prepare');
    expect(session).toEqual({
      kind: 'session_prepare',
      step_key: sessionId,
      request: {
        task_id: TASK,
        workspace_id: WS,
        session_id: sessionId,
        task_environment_id: envId,
        executor_id: 'local',
        executor_profile_id: `local:${PROFILE}`,
        agent_profile_id: PROFILE,
        launch_config_sha256: launchConfig,
        resource_keys: [`session:${sessionId}`],
      },
    });
    expect(only(built.plan, 'launch_intent')).toEqual({
      kind: 'launch_intent',
      step_key: sessionId,
      request: {
        task_id: TASK,
        workspace_id: WS,
        session_id: sessionId,
        agent_profile_id: PROFILE,
        executor_id: 'local',
        executor_profile_id: `local:${PROFILE}`,
        launch_config_sha256: launchConfig,
      },
    });
    expect(built.plan.deferred_launch).toBeNull();
    expect(built.rows.tasks.start_policy).toBe('immediate');
  });

  it('deferred (start_agent with blockers): no session/launch steps, a deferred launch and a blocker attachment', () => {
    const built = build({ start_agent: true, agent_profile_id: PROFILE, blocked_by: [BLOCKER_2, BLOCKER_1] });
    expect(built.plan.start_policy).toBe('deferred');
    expect(countByKind(built.plan)).toEqual({ ...NO_STEPS, workspace_attachment: 1 });
    expect(built.sessionId).toBe(ID(1));
    expect(built.plan.deferred_launch).toMatchObject({
      session_id: ID(1),
      agent_profile_id: PROFILE,
      executor_id: 'local',
      executor_profile_id: `local:${PROFILE}`,
    });
    expect(built.rows.task_environments).toHaveLength(1);
    expect(only(built.plan, 'workspace_attachment').request.blocker_ids).toEqual([BLOCKER_1, BLOCKER_2]);
  });

  it('none with blockers: the attachment carries the edges, nothing is launched or reserved', () => {
    const built = build({ blocked_by: [BLOCKER_1] });
    expect(built.plan.start_policy).toBe('none');
    expect(countByKind(built.plan)).toEqual({ ...NO_STEPS, workspace_attachment: 1 });
    expect(built.sessionId).toBeNull();
    expect(built.plan.deferred_launch).toBeNull();
    expect(built.rows.task_environments).toEqual([]);
  });

  it('requires a resolvable agent profile to start', () => {
    expect(catchError(() => build({ start_agent: true })).field).toBe('/agent_profile_id');
    const err = catchError(() => build({ start_agent: true, agent_profile_id: PROFILE }, { agentProfile: null }));
    expect(err).toBeInstanceOf(ValidationError);
    expect(err.field).toBe('/agent_profile_id');
    expect(err.message).toMatch(/unknown agent profile/);
    // Without start_agent the profile is not needed.
    expect(build({ agent_profile_id: PROFILE }, { agentProfile: null }).plan.start_policy).toBe('none');
  });
});

describe('buildCreationPlan: workspace policy', () => {
  const parentCtx = (group: string | null, env: string | null): Partial<PlanContext> => ({
    parent: { id: PARENT, group_id: group, environment_id: env },
  });

  it.each([
    ['inherit_parent, parent with group+environment', { parent_id: PARENT }, parentCtx(PARENT_GROUP, PARENT_ENV), 1],
    ['inherit_parent, parent without binding', { parent_id: PARENT }, parentCtx(null, null), 0],
    [
      'explicit inherit_parent, parent with environment',
      { parent_id: PARENT, workspace_policy: { mode: 'inherit_parent' } },
      parentCtx(null, PARENT_ENV),
      1,
    ],
    ['shared_group with a group', { workspace_policy: { mode: 'shared_group', group_id: GROUP } }, {}, 1],
    ['shared_group with an environment', { workspace_policy: { mode: 'shared_group', environment_id: ENV } }, {}, 1],
    ['new_workspace without binding', { workspace_policy: { mode: 'new_workspace' } }, {}, 0],
    ['new_workspace with a group', { workspace_policy: { mode: 'new_workspace', group_id: GROUP } }, {}, 1],
    ['unbound', {}, {}, 0],
    ['blockers only', { blocked_by: [BLOCKER_1] }, {}, 1],
  ] as const)('%s → %i attachment step(s)', (_name, body, ctx, count) => {
    const built = build(body as Record<string, unknown>, ctx);
    expect(countByKind(built.plan)).toEqual({ ...NO_STEPS, workspace_attachment: count });
    for (const s of ofKind(built.plan, 'workspace_attachment')) expect(s.step_key).toBe(policyKey(s.request));
  });

  it('binds the inherited group and environment with sorted repository IDs', () => {
    const r = only(build({ parent_id: PARENT }, parentCtx(PARENT_GROUP, ENV)).plan, 'workspace_attachment').request;
    expect(r).toEqual({
      task_id: TASK,
      workspace_id: WS,
      parent_id: PARENT,
      mode: 'inherit_parent',
      group_id: PARENT_GROUP,
      member_ids: [TASK],
      blocker_ids: [],
      environment_id: ENV,
      repository_ids: [REPO_A, REPO_B],
    });
  });

  it('rejects references missing from the context', () => {
    expect(catchError(() => build({ parent_id: PARENT })).field).toBe('/parent_id');
    expect(
      catchError(() => build({ workspace_policy: { mode: 'shared_group', group_id: GROUP } }, { groups: [] })).field,
    ).toBe('/workspace_policy/group_id');
    expect(
      catchError(() =>
        build({ workspace_policy: { mode: 'new_workspace', environment_id: ENV } }, { environments: {} }),
      ).field,
    ).toBe('/workspace_policy/environment_id');
  });
});

describe('buildCreationPlan: attachments, repositories, contributions', () => {
  it('claims a non-empty attachment set in one step keyed by the set hash', () => {
    const built = build({ attachments: [ATT_2, ATT_1] });
    expect(countByKind(built.plan)).toEqual({ ...NO_STEPS, attachment_claim: 1 });
    const claim = only(built.plan, 'attachment_claim');
    expect(claim.step_key).toBe(domainHash('kandev/task-creation-attachment-set/v1', canonicalJson([ATT_1, ATT_2])));
    expect(claim.request).toEqual({
      task_id: TASK,
      workspace_id: WS,
      attachments: [
        { attachment_id: ATT_1, staging_owner_id: 'upload:alice', content_sha256: '1'.repeat(64), size: 10 },
        { attachment_id: ATT_2, staging_owner_id: 'upload:alice', content_sha256: '2'.repeat(64), size: 20 },
      ],
    });
  });

  it('rejects an attachment that is not staged in the context', () => {
    const err = catchError(() => build({ attachments: [ATT_1, ATT_2] }, { attachments: {} }));
    expect(err).toMatchObject({ field: '/attachments/0', code: 'invalid_request' });
    expect(err.message).toMatch(/unknown attachment/);
  });

  it('prepares one fresh branch per fresh repository and a row per repository', () => {
    const built = build({
      repositories: [
        { repository_id: REPO_B, base_branch: 'release/2' },
        { repository_id: REPO_C, fresh_branch: false },
        { repository_id: REPO_A },
      ],
    });
    expect(countByKind(built.plan)).toEqual({ ...NO_STEPS, fresh_branch_prepare: 2 });
    const envId = ID(1);
    expect(built.rows.task_environments).toEqual([{ id: envId, workspace_id: WS, task_id: TASK, kind: 'task' }]);
    const steps = ofKind(built.plan, 'fresh_branch_prepare');
    // Env-repo IDs are drawn in request order: REPO_B → ID(2), REPO_A → ID(3).
    expect(steps.map((s) => s.step_key)).toEqual([ID(2), ID(3)]);
    const [b, a] = steps.map((s) => s.request);
    // The binding is the worktree's place under the data directory, from IDs only (no data dir, no repository name).
    const path = (repo: string): string => `worktrees/${WS}/${TASK}/${repo}`;
    const sha = (p: string): string => createHash('sha256').update(p, 'utf8').digest('hex');
    expect(b).toEqual({
      task_id: TASK,
      workspace_id: WS,
      repository_id: REPO_B,
      task_environment_id: envId,
      task_environment_repo_id: ID(2),
      resource_key: `worktree:${ID(2)}`,
      canonical_path_sha256: sha(path(REPO_B)),
      branch: `taskledger/${TASK}/back-end`,
      base_commit: 'b'.repeat(40),
    });
    expect(a).toMatchObject({
      repository_id: REPO_A,
      branch: `taskledger/${TASK}/frontend`,
      canonical_path_sha256: sha(path(REPO_A)),
    });
    expect(built.rows.task_repositories).toEqual([
      {
        task_id: TASK,
        repository_id: REPO_B,
        workspace_id: WS,
        position: 0,
        base_branch: 'release/2',
        fresh_branch: true,
      },
      { task_id: TASK, repository_id: REPO_C, workspace_id: WS, position: 1, base_branch: 'main', fresh_branch: false },
      { task_id: TASK, repository_id: REPO_A, workspace_id: WS, position: 2, base_branch: 'main', fresh_branch: true },
    ]);
  });

  it('names the branch taskledger/<task_id> when exactly one repository is fresh', () => {
    const built = build(
      { repositories: [{ repository_id: REPO_A }, { repository_id: REPO_B, fresh_branch: false }] },
      { dataDir: '/data/' },
    );
    const r = only(built.plan, 'fresh_branch_prepare').request;
    expect(r.branch).toBe(`taskledger/${TASK}`);
    expect(r.canonical_path_sha256).toBe(
      createHash('sha256').update(`worktrees/${WS}/${TASK}/${REPO_A}`).digest('hex'),
    );
    // Neither the data directory nor the repository's name is bound: an admin may change either.
    const elsewhere = build(
      { repositories: [{ repository_id: REPO_A }, { repository_id: REPO_B, fresh_branch: false }] },
      { dataDir: '/srv/elsewhere' },
    );
    expect(only(elsewhere.plan, 'fresh_branch_prepare').request.canonical_path_sha256).toBe(r.canonical_path_sha256);
  });

  it('plans no environment for repositories used in place', () => {
    const built = build({ repositories: [{ repository_id: REPO_A, fresh_branch: false }] });
    expect(built.plan.steps).toEqual([]);
    expect(built.rows.task_environments).toEqual([]);
    expect(built.rows.task_repositories).toHaveLength(1);
  });

  it('keeps worktree paths distinct when repository names sanitize alike', () => {
    const repositories = {
      ...context().repositories,
      [REPO_A]: { id: REPO_A, name: 'a/b', path: '/x', default_branch: 'main', base_commit: SHA_A },
      [REPO_B]: { id: REPO_B, name: 'a b', path: '/y', default_branch: 'main', base_commit: SHA_A },
    };
    const built = build({ repositories: [{ repository_id: REPO_A }, { repository_id: REPO_B }] }, { repositories });
    const branches = ofKind(built.plan, 'fresh_branch_prepare').map((s) => s.request.branch);
    expect(new Set(branches).size).toBe(2);
    expect(branches).toContain(`taskledger/${TASK}/a-b-${REPO_A}`);
  });

  it('rejects unknown repositories with the pointer of the reference', () => {
    expect(
      catchError(() => build({ repositories: [{ repository_id: REPO_A }, { repository_id: uuid('7', 1) }] })).field,
    ).toBe('/repositories/1/repository_id');
    const c = {
      provider: 'github',
      connection_id: CONN_GH,
      repository_id: uuid('7', 1),
      contribution_kind: 'pull_request',
      contribution_id: 1,
    };
    expect(catchError(() => build({ contributions: [c] })).field).toBe('/contributions/0/repository_id');
  });

  it('associates one remote contribution per requested contribution', () => {
    const built = build({
      contributions: [
        {
          provider: 'gitlab',
          connection_id: CONN_GL,
          repository_id: REPO_B,
          contribution_kind: 'merge_request',
          contribution_id: '9',
        },
        {
          provider: 'github',
          connection_id: CONN_GH,
          repository_id: REPO_A,
          contribution_kind: 'pull_request',
          contribution_id: 41,
        },
        {
          provider: 'github',
          connection_id: CONN_GH,
          repository_id: REPO_A,
          contribution_kind: 'pull_request',
          contribution_id: 40,
        },
      ],
    });
    expect(countByKind(built.plan)).toEqual({ ...NO_STEPS, remote_contribution_associate: 3 });
    const steps = ofKind(built.plan, 'remote_contribution_associate');
    expect(steps.map((s) => s.step_key)).toEqual([
      `github:${CONN_GH}:pull_request:40`,
      `github:${CONN_GH}:pull_request:41`,
      `gitlab:${CONN_GL}:merge_request:9`,
    ]);
    expect(steps[2]?.request).toEqual({
      provider: 'gitlab',
      workspace_id: WS,
      repository_id: REPO_B,
      contribution_kind: 'merge_request',
      contribution_id: '9',
      connection_id: CONN_GL,
      task_id: TASK,
    });
    expect(built.rows.task_environments).toEqual([]);
  });
});

const FULL = {
  description: 'Steps to reproduce…',
  external_id: 'JIRA-7',
  parent_id: PARENT,
  start_agent: true,
  agent_profile_id: PROFILE,
  repositories: [
    { repository_id: REPO_A },
    { repository_id: REPO_B, fresh_branch: false },
    { repository_id: REPO_C, base_branch: 'v2' },
  ],
  attachments: [ATT_2, ATT_1],
  contributions: [
    {
      provider: 'github',
      connection_id: CONN_GH,
      repository_id: REPO_A,
      contribution_kind: 'pull_request',
      contribution_id: '3',
    },
    {
      provider: 'gitlab',
      connection_id: CONN_GL,
      repository_id: REPO_C,
      contribution_kind: 'merge_request',
      contribution_id: '4',
    },
  ],
};
const FULL_CTX: Partial<PlanContext> = { parent: { id: PARENT, group_id: PARENT_GROUP, environment_id: PARENT_ENV } };

describe('buildCreationPlan: the whole plan', () => {
  it('has exact counts per kind, sorted steps and rows, and passes the closed validator', () => {
    const { plan, rows } = build(FULL, FULL_CTX);
    expect(countByKind(plan)).toEqual({
      workspace_attachment: 1,
      attachment_claim: 1,
      fresh_branch_prepare: 2,
      remote_contribution_associate: 2,
      session_prepare: 1,
      launch_intent: 1,
    });
    const keys = plan.steps.map((s) => [s.kind, s.step_key] as const);
    const sorted = [...keys].sort((x, y) =>
      x[0] !== y[0] ? (x[0] < y[0] ? -1 : 1) : x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : 0,
    );
    expect(keys).toEqual(sorted);
    expect(plan.steps.map((s) => s.kind)).toEqual([
      'attachment_claim',
      'fresh_branch_prepare',
      'fresh_branch_prepare',
      'launch_intent',
      'remote_contribution_associate',
      'remote_contribution_associate',
      'session_prepare',
      'workspace_attachment',
    ]);
    expect(plan.database_rows.map((r) => `${r.table}:${r.key}`)).toEqual([
      `task_environments:${ID(2)}`,
      `task_identities:${TASK}`,
      `task_repositories:${TASK}:${REPO_A}`,
      `task_repositories:${TASK}:${REPO_B}`,
      `task_repositories:${TASK}:${REPO_C}`,
      `tasks:${TASK}`,
    ]);
    const byKey = new Map(plan.database_rows.map((r) => [`${r.table}:${r.key}`, r.row_sha256]));
    expect(byKey.get(`tasks:${TASK}`)).toBe(rowHash(rows.tasks));
    expect(byKey.get(`task_identities:${TASK}`)).toBe(rowHash({ task_id: TASK, workspace_id: WS }));
    expect(byKey.get(`task_repositories:${TASK}:${REPO_C}`)).toBe(rowHash(rows.task_repositories[2]));
    expect(rows.tasks).toEqual({
      id: TASK,
      workspace_id: WS,
      workflow_id: WORKFLOW,
      workflow_step_id: WORKFLOW_STEP,
      parent_id: PARENT,
      title: 'Fix the flaky test',
      description: 'Steps to reproduce…',
      start_policy: 'immediate',
    });
    expect(validateCreationPlan(JSON.parse(canonicalJson(plan)))).toEqual(plan);
  });

  it('is deterministic: same input and newId sequence → identical manifest hash', () => {
    const a = build(FULL, FULL_CTX);
    const b = build(FULL, { ...FULL_CTX, newId: idSeq() });
    expect(canonicalJson(a.plan)).toBe(canonicalJson(b.plan));
    expect(manifestHash(a.plan)).toBe(manifestHash(b.plan));
    // A differently ordered but equivalent request gives the same plan.
    const reordered = { ...FULL, attachments: [ATT_1, ATT_2, ATT_1], contributions: [...FULL.contributions].reverse() };
    expect(manifestHash(build(reordered, FULL_CTX).plan)).toBe(manifestHash(a.plan));
  });

  it('changes the manifest hash when any input changes', () => {
    const ctxRepos = context().repositories;
    const variants: [string, Record<string, unknown>, Partial<PlanContext>][] = [
      ['baseline', {}, {}],
      ['title', { title: 'Other title' }, {}],
      ['description', { description: 'other' }, {}],
      ['external_id', { external_id: 'JIRA-8' }, {}],
      ['external_id case', { external_id: 'jira-7' }, {}],
      ['start_agent', { start_agent: false }, {}],
      ['blocked_by', { blocked_by: [BLOCKER_1] }, {}],
      ['parent binding', {}, { parent: { id: PARENT, group_id: null, environment_id: PARENT_ENV } }],
      ['policy', { workspace_policy: { mode: 'shared_group', group_id: GROUP } }, {}],
      ['repository order', { repositories: [FULL.repositories[1], FULL.repositories[0], FULL.repositories[2]] }, {}],
      [
        'fresh_branch',
        { repositories: [{ repository_id: REPO_A, fresh_branch: false }, ...FULL.repositories.slice(1)] },
        {},
      ],
      [
        'base_branch',
        { repositories: [{ repository_id: REPO_A, base_branch: 'dev' }, ...FULL.repositories.slice(1)] },
        {},
      ],
      ['attachments', { attachments: [ATT_1] }, {}],
      [
        'contribution id',
        { contributions: [{ ...FULL.contributions[0], contribution_id: '5' }, FULL.contributions[1]] },
        {},
      ],
      ['task id', { task_id: uuid('b', 9) }, { taskId: uuid('b', 9) }],
      ['workflow', {}, { workflow: null }],
      [
        'base commit',
        {},
        { repositories: { ...ctxRepos, [REPO_A]: { ...ctxRepos[REPO_A]!, base_commit: 'c'.repeat(40) } } },
      ],
      [
        'executor',
        {},
        { agentProfile: { id: PROFILE, executor_kind: 'local', executor: { kind: 'local', command: ['other'] } } },
      ],
      [
        'attachment content',
        {},
        {
          attachments: {
            ...context().attachments,
            [ATT_1]: { id: ATT_1, staging_owner_id: 'upload:alice', content_sha256: '3'.repeat(64), size: 10 },
          },
        },
      ],
      ['newId sequence', {}, { newId: idSeq(100) }],
    ];
    const hashes = variants.map(([, body, ctx]) =>
      manifestHash(build({ ...FULL, ...body }, { ...FULL_CTX, ...ctx }).plan),
    );
    const seen = new Map<string, string>();
    hashes.forEach((h, i) => {
      const name = variants[i]![0];
      expect(seen.get(h), `${name} collides with ${seen.get(h)}`).toBeUndefined();
      seen.set(h, name);
    });
  });

  it('rejects a workflow step the context did not resolve', () => {
    expect(catchError(() => build({ workflow_step_id: uuid('c', 9) })).field).toBe('/workflow_step_id');
    expect(build({ workflow_step_id: WORKFLOW_STEP }).plan.workflow_step_id).toBe(WORKFLOW_STEP);
  });

  it('guards against a context that contradicts the request or a broken ID generator', () => {
    expect(() => build({}, { workspaceId: uuid('a', 2) })).toThrow(/workspace/);
    expect(() => build({ task_id: TASK }, { taskId: uuid('b', 9) })).toThrow(/task ID/);
    expect(catchError(() => build({ blocked_by: [TASK] })).field).toBe('/blocked_by/0');
    expect(() => build({ start_agent: true, agent_profile_id: PROFILE }, { newId: () => ID(1) })).toThrow(/repeated/);
    expect(() => build({ start_agent: true, agent_profile_id: PROFILE }, { newId: () => TASK })).toThrow(/repeated/);
    expect(() => build({ start_agent: true, agent_profile_id: PROFILE }, { newId: () => 'X' })).toThrow(
      /lowercase UUID/,
    );
  });
});

describe('step guards', () => {
  it('refuses duplicate (kind, step_key) and shared effect authorities', async () => {
    const { sortAndGuardSteps } = await import('../../src/plan/step-guards');
    const { plan } = build(FULL, FULL_CTX);
    const fresh = plan.steps.find((s) => s.kind === 'fresh_branch_prepare') as PlanStep & {
      kind: 'fresh_branch_prepare';
    };
    expect(() => sortAndGuardSteps([...plan.steps, fresh])).toThrow(/duplicate step/);
    const sameWorktree = {
      ...fresh,
      step_key: uuid('9', 50),
      request: { ...fresh.request, task_environment_repo_id: uuid('9', 50), repository_id: uuid('7', 7) },
    };
    expect(() => sortAndGuardSteps([...plan.steps, sameWorktree])).toThrow(/effect authority/);
    const claim = plan.steps.find((s) => s.kind === 'attachment_claim') as PlanStep & { kind: 'attachment_claim' };
    expect(() => sortAndGuardSteps([...plan.steps, { ...claim, step_key: 'f'.repeat(64) }])).toThrow(/attachment:/);
    expect(sortAndGuardSteps([...plan.steps].reverse())).toEqual(plan.steps);
  });
});
