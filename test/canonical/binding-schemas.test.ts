import { describe, expect, it } from 'vitest';
import { validateActorBinding, validateCreationPlan } from '../../src/canonical/validate';
import type { CreationPlan } from '../../src/canonical/types';
import { ACTOR_VARIANTS, ACTOR_VARIANT_NAMES } from '../../src/domain/vocab';
import { expectInvalid, mutate } from './expect-invalid';
import * as F from './fixtures';

const UPPER_UUID = 'ABCDEF01-2345-4678-89AB-CDEF01234567';
/** Index of a step kind in the fixture plan (steps are sorted by kind). */
const at = (plan: CreationPlan, kind: string): number => plan.steps.findIndex((s) => s.kind === kind);

describe('CreationPlan schema', () => {
  const v = validateCreationPlan;

  it('accepts the fixture plan and returns it unchanged', () => {
    const plan = F.plan();
    expect(v(plan)).toBe(plan);
    expect(plan.steps.map((s) => s.kind)).toEqual([
      'attachment_claim',
      'fresh_branch_prepare',
      'launch_intent',
      'remote_contribution_associate',
      'session_prepare',
      'workspace_attachment',
    ]);
  });

  it('rejects an extra field at every level', () => {
    expectInvalid(() => v(mutate(F.plan(), (p) => (p.extra = 1))), '/extra', 'unknown field "extra"');
    expectInvalid(() => v(mutate(F.plan(), (p) => (p.steps[0].note = 'x'))), '/steps/0/note', 'unknown field "note"');
    expectInvalid(
      () => v(mutate(F.plan(), (p) => (p.steps[2].request.extra = true))),
      '/steps/2/request/extra',
      /unknown field/,
    );
    expectInvalid(() => v(mutate(F.plan(), (p) => (p.database_rows[0].n = 1))), '/database_rows/0/n', /unknown field/);
  });

  it('rejects a missing field, including an omitted null optional', () => {
    expectInvalid(
      () => v(mutate(F.plan(), (p) => delete p.deferred_launch)),
      '/deferred_launch',
      /missing required field/,
    );
    expectInvalid(() => v(mutate(F.plan(), (p) => delete p.steps[1].step_key)), '/steps/1/step_key', /missing/);
  });

  it('rejects wrong types and constants', () => {
    expectInvalid(() => v(mutate(F.plan(), (p) => (p.version = 2))), '/version', 'must be 1');
    expectInvalid(() => v(mutate(F.plan(), (p) => (p.version = '1'))), '/version', 'must be an integer');
    expectInvalid(() => v(mutate(F.plan(), (p) => (p.steps = {}))), '/steps', 'must be an array');
    expectInvalid(() => v(mutate(F.plan(), (p) => (p.workflow_id = 7))), '/workflow_id', 'must be a string or null');
    expectInvalid(
      () => v(mutate(F.plan(), (p) => (p.start_policy = 'later'))),
      '/start_policy',
      /must be one of "none"/,
    );
  });

  it('rejects an uppercase UUID and a bad hash', () => {
    expectInvalid(
      () => v(mutate(F.plan(), (p) => (p.task_id = UPPER_UUID))),
      '/task_id',
      'must be a lowercase RFC 4122 UUID',
    );
    expectInvalid(() => v(mutate(F.plan(), (p) => (p.parent_id = UPPER_UUID))), '/parent_id', /lowercase/);
    expectInvalid(
      () => v(mutate(F.plan(), (p) => (p.request_sha256 = F.h('F')))),
      '/request_sha256',
      /64 lowercase hex/,
    );
  });

  it('rejects unsorted and duplicate database_rows', () => {
    expectInvalid(
      () => v(mutate(F.plan(), (p) => p.database_rows.reverse())),
      '/database_rows/1',
      /sorted by \(table, key\)/,
    );
    const dup = mutate(F.plan(), (p) => (p.database_rows[1] = { ...p.database_rows[0], row_sha256: F.h('0') }));
    expectInvalid(() => v(dup), '/database_rows/1', /duplicate/);
    expectInvalid(
      () => v(mutate(F.plan(), (p) => (p.database_rows[0].table = 'Tasks'))),
      '/database_rows/0/table',
      /snake_case/,
    );
  });

  it('rejects unsorted steps and duplicate (kind, step_key)', () => {
    expectInvalid(() => v(mutate(F.plan(), (p) => p.steps.reverse())), '/steps/1', /sorted by \(kind, step_key\)/);
    const dup = mutate(F.plan(), (p) => p.steps.splice(3, 0, structuredClone(p.steps[3])));
    expectInvalid(() => v(dup), '/steps/4', /duplicate/);
  });

  it('rejects a step whose request does not match its kind, or an unknown kind', () => {
    const swapped = mutate(F.plan(), (p) => (p.steps[at(p, 'launch_intent')].request = F.request('session_prepare')));
    expectInvalid(() => v(swapped), '/steps/2/request/task_environment_id', 'unknown field "task_environment_id"');
    expectInvalid(
      () => v(mutate(F.plan(), (p) => (p.steps[0].kind = 'provider_pr_association'))),
      '/steps/0/kind',
      /must be one of/,
    );
  });

  it('checks list order inside step requests', () => {
    const i = at(F.plan(), 'workspace_attachment');
    const plan = mutate(F.plan(), (p) => p.steps[i].request.blocker_ids.reverse());
    expectInvalid(() => v(plan), `/steps/${i}/request/blocker_ids/1`, /sorted/);
  });

  it('requires every request to name the plan task, workspace and parent', () => {
    expectInvalid(
      () => v(mutate(F.plan(), (p) => (p.steps[0].request.task_id = F.ID.blockerA))),
      '/steps/0/request/task_id',
      /plan's task_id/,
    );
    expectInvalid(
      () => v(mutate(F.plan(), (p) => (p.steps[1].request.workspace_id = F.ID.group))),
      '/steps/1/request/workspace_id',
      /workspace_id/,
    );
    const i = at(F.plan(), 'workspace_attachment');
    expectInvalid(
      () => v(mutate(F.plan(), (p) => (p.steps[i].request.parent_id = F.ID.blockerA))),
      `/steps/${i}/request/parent_id`,
      /parent_id/,
    );
  });

  it('requires canonical step keys', () => {
    const fb = at(F.plan(), 'fresh_branch_prepare');
    expectInvalid(
      () => v(mutate(F.plan(), (p) => (p.steps[fb].step_key = F.ID.repoA))),
      `/steps/${fb}/step_key`,
      /canonical fresh_branch_prepare key/,
    );
    const rc = at(F.plan(), 'remote_contribution_associate');
    const badRemote = mutate(F.plan(), (p) => (p.steps[rc].step_key = `github:${F.ID.connection}:pull_request:43`));
    expectInvalid(() => v(badRemote), `/steps/${rc}/step_key`, /github:dddddddd/);
    const wa = at(F.plan(), 'workspace_attachment');
    expectInvalid(
      () => v(mutate(F.plan(), (p) => (p.steps[wa].step_key = 'policy'))),
      `/steps/${wa}/step_key`,
      /SHA-256/,
    );
  });

  it('enforces closed cardinality by start policy', () => {
    const noLaunch = mutate(F.plan(), (p) => p.steps.splice(at(p, 'launch_intent'), 1));
    expectInvalid(() => v(noLaunch), '/steps', /exactly one session_prepare and one launch_intent/);
    const none = mutate(F.plan(), (p) => (p.start_policy = 'none'));
    expectInvalid(() => v(none), '/steps', /none plan has no session_prepare/);
    const deferred = mutate(F.plan(), (p) => {
      p.start_policy = 'deferred';
      p.steps = p.steps.filter((s: { kind: string }) => s.kind !== 'launch_intent' && s.kind !== 'session_prepare');
      p.deferred_launch = {
        session_id: F.ID.session,
        agent_profile_id: F.ID.agentProfile,
        executor_id: 'local',
        executor_profile_id: 'default',
        launch_config_sha256: F.h('4'),
      };
    });
    expect(v(deferred).start_policy).toBe('deferred');
    expectInvalid(
      () => v(mutate(deferred, (p) => (p.deferred_launch.extra = 1))),
      '/deferred_launch/extra',
      /unknown field/,
    );
    expectInvalid(() => v(mutate(deferred, (p) => (p.start_policy = 'none'))), '/deferred_launch', /must be null/);
  });

  it('allows at most one workspace_attachment and one attachment_claim', () => {
    const two = mutate(F.plan(), (p) => {
      const extra = structuredClone(p.steps[0]);
      extra.step_key = F.h('b');
      p.steps.splice(1, 0, extra);
    });
    expectInvalid(() => v(two), '/steps', /at most one attachment_claim/);
  });

  it('requires session_prepare and launch_intent to describe the same launch', () => {
    const i = at(F.plan(), 'launch_intent');
    expectInvalid(
      () => v(mutate(F.plan(), (p) => (p.steps[i].request.launch_config_sha256 = F.h('0')))),
      `/steps/${i}/request/launch_config_sha256`,
      /session_prepare/,
    );
  });

  it('rejects two steps claiming one effect authority', () => {
    const second = mutate(F.plan(), (p) => {
      const fb = structuredClone(p.steps[at(p, 'fresh_branch_prepare')]);
      fb.request.task_environment_repo_id = 'bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbc';
      fb.request.resource_key = 'worktree:other';
      fb.step_key = fb.request.task_environment_repo_id;
      p.steps.splice(2, 0, fb);
    });
    expectInvalid(() => v(second), '/steps/2/request/repository_id', /already prepared/);
    const clash = mutate(
      F.plan(),
      (p) => (p.steps[at(p, 'session_prepare')].request.resource_keys = [`worktree:${F.ID.envRepo}`]),
    );
    expectInvalid(
      () => v(clash),
      `/steps/${at(F.plan(), 'session_prepare')}/request/resource_keys/0`,
      /already claimed/,
    );
  });
});

describe('ActorBindingDocument schema', () => {
  const v = validateActorBinding;

  it.each(ACTOR_VARIANT_NAMES)('accepts variant %s with its registry pair', (variant) => {
    const doc = {
      ...F.actor(),
      variant,
      ...ACTOR_VARIANTS[variant],
      lease_generation: variant === 'operation_recovery' ? 4 : null,
    };
    expect(v(doc)).toBe(doc);
  });

  it.each(ACTOR_VARIANT_NAMES)('rejects variant %s with another variant’s auth_mode or authority_kind', (variant) => {
    const other = ACTOR_VARIANT_NAMES.find((n) => n !== variant) as (typeof ACTOR_VARIANT_NAMES)[number];
    const doc = { ...F.actor(), variant, ...ACTOR_VARIANTS[variant] };
    expectInvalid(
      () => v({ ...doc, auth_mode: ACTOR_VARIANTS[other].auth_mode }),
      '/auth_mode',
      `must be "${ACTOR_VARIANTS[variant].auth_mode}"`,
    );
    expectInvalid(
      () => v({ ...doc, authority_kind: ACTOR_VARIANTS[other].authority_kind }),
      '/authority_kind',
      /must be/,
    );
  });

  it('rejects an unknown or non-string variant', () => {
    expectInvalid(() => v({ ...F.actor(), variant: 'root' }), '/variant', /must be one of "api_principal"/);
    expectInvalid(() => v({ ...F.actor(), variant: 3 }), '/variant', /must be a string/);
  });

  it('rejects an extra field, a missing field and a wrong type', () => {
    expectInvalid(() => v({ ...F.actor(), scopes: [] }), '/scopes', 'unknown field "scopes"');
    expectInvalid(
      () => v(mutate(F.actor(), (d) => delete d.lease_generation)),
      '/lease_generation',
      /missing required field/,
    );
    expectInvalid(() => v({ ...F.actor(), authority_revision: '3' }), '/authority_revision', 'must be an integer');
  });

  it('requires unsigned integers for authority_revision and lease_generation', () => {
    expect(v({ ...F.actor(), authority_revision: 0, lease_generation: 0 }).lease_generation).toBe(0);
    expectInvalid(() => v({ ...F.actor(), authority_revision: -1 }), '/authority_revision', /must be >= 0/);
    expectInvalid(() => v({ ...F.actor(), authority_revision: 1.5 }), '/authority_revision', /integer/);
    expectInvalid(() => v({ ...F.actor(), lease_generation: -2 }), '/lease_generation', />= 0/);
  });

  it('bounds principal_id and authority_id and requires a lowercase workspace UUID', () => {
    expectInvalid(() => v({ ...F.actor(), principal_id: '' }), '/principal_id', /must not be empty/);
    expectInvalid(() => v({ ...F.actor(), authority_id: 'x'.repeat(201) }), '/authority_id', /at most 200/);
    expect(v({ ...F.actor(), authority_id: 'x'.repeat(200) }).authority_id).toHaveLength(200);
    expectInvalid(() => v({ ...F.actor(), workspace_id: UPPER_UUID }), '/workspace_id', /lowercase RFC 4122/);
    expectInvalid(() => v({ ...F.actor(), version: 2 }), '/version', 'must be 1');
  });
});
