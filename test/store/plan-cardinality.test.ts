/**
 * Begin writes exactly the plan's closed step cardinality for each start
 * policy and workspace-policy mode, and every stored step row re-derives from
 * the manifest. Runs on PostgreSQL and MySQL/MariaDB.
 */
import { describe, expect, it } from 'vitest';
import { parseCanonical } from '../../src/canonical/canonical-json';
import { manifestHash } from '../../src/canonical/hash';
import type { CreationPlan } from '../../src/canonical/types';
import { sql, useTestDb } from '../support/db';
import { begin, settledTask, stepRows } from '../support/ledger';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';

const t = useTestDb();

type Case = [
  string,
  (ws: SeededWorkspace, parentId: string) => Record<string, unknown>,
  Record<string, number>,
  string,
];

const cases: Case[] = [
  ['none: no session, no launch, no attachment', () => ({}), {}, 'none'],
  [
    'immediate: one session_prepare and one launch_intent',
    (ws) => ({ start_agent: true, agent_profile_id: ws.agentProfileId }),
    { session_prepare: 1, launch_intent: 1 },
    'immediate',
  ],
  [
    'deferred (blockers): no session/launch; blockers select the attachment',
    (ws, parent) => ({ start_agent: true, agent_profile_id: ws.agentProfileId, blocked_by: [parent] }),
    { workspace_attachment: 1 },
    'deferred',
  ],
  ['none with blockers stays none', (_ws, parent) => ({ blocked_by: [parent] }), { workspace_attachment: 1 }, 'none'],
  [
    'shared_group with a group',
    (ws) => ({ workspace_policy: { mode: 'shared_group', group_id: ws.groupId } }),
    { workspace_attachment: 1 },
    'none',
  ],
  [
    'shared_group with an environment',
    (ws) => ({ workspace_policy: { mode: 'shared_group', environment_id: ws.sharedEnvironmentId } }),
    { workspace_attachment: 1 },
    'none',
  ],
  ['new_workspace without binding selects none', () => ({ workspace_policy: { mode: 'new_workspace' } }), {}, 'none'],
  [
    'new_workspace with a group',
    (ws) => ({ workspace_policy: { mode: 'new_workspace', group_id: ws.groupId } }),
    { workspace_attachment: 1 },
    'none',
  ],
  ['inherit_parent with an unbound parent selects none', (_ws, parent) => ({ parent_id: parent }), {}, 'none'],
  [
    'one attachment_claim per attachment set',
    (ws) => ({ attachments: ws.attachmentIds }),
    { attachment_claim: 1 },
    'none',
  ],
  [
    'one fresh_branch_prepare per fresh repository',
    (ws) => ({ repositories: [{ repository_id: ws.repositoryId }] }),
    { fresh_branch_prepare: 1 },
    'none',
  ],
  [
    'no branch for fresh_branch: false',
    (ws) => ({ repositories: [{ repository_id: ws.repositoryId, fresh_branch: false }] }),
    {},
    'none',
  ],
  [
    'one remote_contribution_associate per contribution',
    (ws) => ({
      contributions: ['1', '2'].map((id) => ({
        provider: 'github',
        connection_id: ws.connectionId,
        repository_id: ws.repositoryId,
        contribution_kind: 'pull_request',
        contribution_id: id,
      })),
    }),
    { remote_contribution_associate: 2 },
    'none',
  ],
];

describe('Begin step cardinality', () => {
  it.each(cases)('%s', async (_name, body, expected, policy) => {
    const ws = await seedWorkspace(t.db);
    const parent = await settledTask(t.db, ws, { title: 'parent' });
    const res = await begin(t.db, ws, body(ws, parent.task.id));
    expect(res.outcome).toBe('Created');
    const rows = await stepRows(t.db, res.operationId);
    const counts: Record<string, number> = {};
    for (const r of rows) counts[r.kind] = (counts[r.kind] ?? 0) + 1;
    expect(counts).toEqual(expected);
    const [op] = await sql<{ plan_json: string; manifest_hash: string; start_policy: string }>(
      t.db,
      'SELECT plan_json, manifest_hash, start_policy FROM task_creation_operations WHERE id = ?',
      [res.operationId],
    );
    const plan = parseCanonical(op!.plan_json) as CreationPlan;
    expect(op!.start_policy).toBe(policy);
    expect(plan.start_policy).toBe(policy);
    expect(manifestHash(plan)).toBe(op!.manifest_hash);
    expect(plan.steps.map((s) => `${s.kind}/${s.step_key}`)).toEqual(rows.map((r) => `${r.kind}/${r.step_key}`));
    expect(plan.deferred_launch !== null).toBe(policy === 'deferred');
  });
});
