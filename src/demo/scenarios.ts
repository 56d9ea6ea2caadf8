/**
 * The demo's request catalogue: which create requests the batch sends, in
 * what order, and what each is meant to show.
 *
 * - `--tasks N` ordinary creations cycle through TEMPLATES (the first one has
 *   every step kind, so even a small batch touches them all); when N >= 2 the
 *   last one is `blocked_by` the first, so it is sent after its blocker exists
 *   and has a deferred start.
 * - Fault scenarios, always sent: a webhook delivered four times with one
 *   external ID, a pull request the fake provider answers 500 for twice
 *   (transient), a pull request it does not know (404, permanent), a
 *   malformed external ID and an unknown field (both 400, nothing written).
 *
 * PR numbers / MR IIDs: ordinary task i links PR i+1 / MR i+1 (a contribution
 * belongs to one task only); the faults use PR_TRANSIENT and PR_MISSING.
 */
import type { FakeProviderServer } from '../providers/fake-server';
import type { DemoWorkspace } from './setup';

export const PR_TRANSIENT = 500;
export const PR_MISSING = 404;
/** How many times the fake provider answers 500 for PR_TRANSIENT before it answers normally. */
export const TRANSIENT_FAULTS = 2;

/** Why 10 s: the slowest ordinary creation (Git worktree, two provider calls) takes well under a second; the
 *  transient fault needs its two backoffs (1 s + 2 s). */
export const WAIT_MS = 10_000;
/** Why 3 s: the missing PR fails its step at once; the request should not hold a slot for the full wait. */
const FAULT_WAIT_MS = 3_000;

export interface DemoRequest {
  label: string;
  /** True for the fault scenarios; only ordinary creations decide the exit code. */
  fault: boolean;
  /** What a correct system answers: a finished creation, or a 400 with nothing written. */
  expect: 'complete' | 'reject' | 'observe';
  waitMs: number;
  body: Record<string, unknown>;
}

type Body = Record<string, unknown>;

interface Template {
  label: string;
  build(ws: DemoWorkspace, i: number, title: string): Promise<Body> | Body;
}

const gh = (ws: DemoWorkspace, n: number) => ({
  provider: 'github',
  connection_id: ws.githubConnectionId,
  repository_id: ws.app.id,
  contribution_kind: 'pull_request',
  contribution_id: String(n),
});
const gl = (ws: DemoWorkspace, n: number) => ({
  provider: 'gitlab',
  connection_id: ws.gitlabConnectionId,
  repository_id: ws.service.id,
  contribution_kind: 'merge_request',
  contribution_id: String(n),
});
const base = (ws: DemoWorkspace, title: string): Body => ({ workspace_id: ws.id, title });
const agent = (ws: DemoWorkspace): Body => ({ start_agent: true, agent_profile_id: ws.agentProfileId });

export const TEMPLATES: readonly Template[] = [
  {
    label: 'every step kind (branch, files, PR, MR, group, agent)',
    build: async (ws, i, title) => ({
      ...base(ws, title),
      description: 'Fix the flaky build: a worktree, two staged files, a GitHub PR and a GitLab MR.',
      ...agent(ws),
      repositories: [{ repository_id: ws.app.id, fresh_branch: true }],
      attachments: await ws.stageFor(title, 2),
      contributions: [gh(ws, i + 1), gl(ws, i + 1)],
      workspace_policy: { mode: 'shared_group', group_id: ws.groupId },
    }),
  },
  { label: 'database only', build: (ws, _i, title) => ({ ...base(ws, title), start_agent: false }) },
  {
    label: 'fresh branch + worktree',
    build: (ws, _i, title) => ({ ...base(ws, title), repositories: [{ repository_id: ws.service.id }] }),
  },
  {
    label: 'agent launch in a worktree',
    build: (ws, _i, title) => ({ ...base(ws, title), ...agent(ws), repositories: [{ repository_id: ws.app.id }] }),
  },
  {
    label: 'staged attachments',
    build: async (ws, _i, title) => ({ ...base(ws, title), attachments: await ws.stageFor(title, 1) }),
  },
  {
    label: 'GitHub pull request',
    build: (ws, i, title) => ({ ...base(ws, title), contributions: [gh(ws, i + 1)] }),
  },
  {
    label: 'GitLab merge request',
    build: (ws, i, title) => ({ ...base(ws, title), contributions: [gl(ws, i + 1)] }),
  },
  {
    label: 'shared group',
    build: (ws, _i, title) => ({
      ...base(ws, title),
      workspace_policy: { mode: 'shared_group', group_id: ws.groupId },
    }),
  },
  {
    label: 'shared environment',
    build: (ws, _i, title) => ({
      ...base(ws, title),
      workspace_policy: { mode: 'shared_group', environment_id: ws.environmentId },
    }),
  },
  {
    label: 'repository without a fresh branch',
    build: (ws, _i, title) => ({
      ...base(ws, title),
      repositories: [{ repository_id: ws.app.id, fresh_branch: false }],
    }),
  },
  {
    label: 'agent launch without a repository',
    build: (ws, _i, title) => ({ ...base(ws, title), ...agent(ws) }),
  },
];

export interface BatchPlan {
  /** Ordinary creations sent first, concurrently. */
  tasks: DemoRequest[];
  /** The deferred task, built once its blocker's ID is known (null for N < 2). */
  deferred: ((blockerTaskId: string) => DemoRequest) | null;
  /** Fault scenarios sent alongside the ordinary creations. */
  faults: DemoRequest[];
  webhook: { externalId: string; body: Body; deliveries: number };
}

export async function planBatch(ws: DemoWorkspace, taskCount: number, runId: string): Promise<BatchPlan> {
  const ordinary = taskCount >= 2 ? taskCount - 1 : taskCount;
  const tasks: DemoRequest[] = [];
  for (let i = 0; i < ordinary; i++) {
    const t = TEMPLATES[i % TEMPLATES.length]!;
    const title = `demo task ${i + 1}: ${t.label}`;
    tasks.push({
      label: t.label,
      fault: false,
      expect: 'complete',
      waitMs: WAIT_MS,
      body: await t.build(ws, i, title),
    });
  }
  const deferred =
    taskCount >= 2
      ? (blocker: string): DemoRequest => ({
          label: 'blocked_by task 1 (deferred start)',
          fault: false,
          expect: 'complete',
          waitMs: WAIT_MS,
          body: {
            ...base(ws, `demo task ${taskCount}: blocked by task 1, starts when it is done`),
            ...agent(ws),
            blocked_by: [blocker],
          },
        })
      : null;
  const faults: DemoRequest[] = [
    {
      label: `GitHub PR #${PR_TRANSIENT}: provider answers 500 ${TRANSIENT_FAULTS}x`,
      fault: true,
      expect: 'observe',
      waitMs: WAIT_MS,
      body: {
        ...base(ws, `fault: PR #${PR_TRANSIENT} behind a flaky provider`),
        contributions: [gh(ws, PR_TRANSIENT)],
      },
    },
    {
      label: `GitHub PR #${PR_MISSING}: provider answers 404`,
      fault: true,
      expect: 'observe',
      waitMs: FAULT_WAIT_MS,
      body: { ...base(ws, `fault: PR #${PR_MISSING} that does not exist`), contributions: [gh(ws, PR_MISSING)] },
    },
    {
      label: 'malformed external ID (control character)',
      fault: true,
      expect: 'reject',
      waitMs: FAULT_WAIT_MS,
      body: { ...base(ws, 'fault: a malformed external ID'), external_id: 'ticket\u0000-7' },
    },
    {
      label: 'unknown field "priority"',
      fault: true,
      expect: 'reject',
      waitMs: FAULT_WAIT_MS,
      body: { ...base(ws, 'fault: a request with an unknown field'), priority: 'high' },
    },
  ];
  const externalId = `github-delivery-${runId}`;
  return {
    tasks,
    deferred,
    faults,
    webhook: {
      externalId,
      deliveries: 4,
      body: {
        ...base(ws, 'webhook: issue #7 opened'),
        external_id: externalId,
        repositories: [{ repository_id: ws.service.id }],
      },
    },
  };
}

/** Makes the fake provider fail the transient-fault PR's reads a few times; the missing PR needs no fault (404). */
export function armFaults(provider: FakeProviderServer): void {
  provider.injectFault({
    method: 'GET',
    path: new RegExp(`/pulls/${PR_TRANSIENT}$`),
    fault: 500,
    times: TRANSIENT_FAULTS,
  });
}
