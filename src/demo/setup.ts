/**
 * The demo workspace, built through the same setup writers the REST API uses
 * (src/setup/): two real local Git repositories with a commit on `main`, a
 * workflow, an agent profile whose command is harmless and leaves a visible
 * file, a GitHub and a GitLab connection pointing at the fake provider server
 * (with the pull and merge requests the batch links to), a group, a shared
 * environment over both repositories, a member token and, when no
 * TASKLEDGER_ADMIN_TOKEN is configured, an operator token.
 *
 * Attachments are staged per task (`stageFor`), because an attachment is
 * claimed by exactly one task. Every file lives under the data directory.
 */
import { execFile } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Db } from '../db/tx';
import type { FakeProviderServer } from '../providers/fake-server';
import {
  createAgentProfile,
  createGroup,
  createProviderConnection,
  createRepository,
  createSharedEnvironment,
  createWorkflow,
  createWorkspace,
  issueToken,
  stageAttachment,
} from '../setup/index';

const run = promisify(execFile);

/** The fake server's seed tokens (DEFAULT_FAKE_TOKENS): any other token gets 401. */
const GITHUB_TOKEN = 'ghp_test';
const GITLAB_TOKEN = 'glpat-test';
export const MEMBER_PRINCIPAL = 'demo-member';
export const OPERATOR_PRINCIPAL = 'demo-operator';

/** What the agent runs: one line into a file in its working directory, nothing else. */
export const AGENT_COMMAND = ['sh', '-c', 'echo "agent for $TASKLEDGER_TASK_ID started" > AGENT_STARTED.txt'];
export const AGENT_MARKER_FILE = 'AGENT_STARTED.txt';

export interface DemoRepo {
  id: string;
  name: string;
  path: string;
  slug: string;
}

export interface DemoWorkspace {
  id: string;
  name: string;
  app: DemoRepo;
  service: DemoRepo;
  workflowStepIds: string[];
  agentProfileId: string;
  githubConnectionId: string;
  gitlabConnectionId: string;
  groupId: string;
  environmentId: string;
  memberToken: string;
  /** Issued here when the environment configures no admin token; null otherwise. */
  operatorToken: string | null;
  /** Stages `count` small files owned by the member principal and returns their attachment IDs. */
  stageFor(label: string, count: number): Promise<string[]>;
}

export interface DemoSetupInput {
  db: Db;
  dataDir: string;
  provider: FakeProviderServer;
  adminTokenConfigured: boolean;
  /** Pull request numbers (GitHub, on the `app` repository) and merge request IIDs (GitLab, on `service`) to create. */
  pullRequests: number[];
  mergeRequests: number[];
}

/** `git init` + one commit on `main`, with a local identity so it works on a machine without a global Git config. */
async function makeRepository(path: string, name: string): Promise<void> {
  const git = (...args: string[]) => run('git', ['-C', path, ...args], { timeout: 10_000 });
  await mkdir(path, { recursive: true });
  await git('init', '-q', '-b', 'main');
  await git('config', 'user.email', 'demo@taskledger.invalid');
  await git('config', 'user.name', 'taskledger demo');
  await writeFile(join(path, 'README.md'), `# ${name}\n\nA repository created by \`taskledger demo\`.\n`);
  await git('add', 'README.md');
  await git('commit', '-q', '-m', `${name}: initial commit`);
}

export async function createDemoWorkspace(input: DemoSetupInput): Promise<DemoWorkspace> {
  const { db, dataDir, provider } = input;
  const stamp = new Date().toISOString().replace(/[-:]/g, '').replace(/\..*$/, '').replace('T', '-');
  const name = `demo-${stamp}`;
  const ws = await createWorkspace(db, { name });
  const short = ws.id.slice(0, 8);

  const repo = async (base: string, slug: string): Promise<DemoRepo> => {
    const path = join(dataDir, 'demo-repos', `${base}-${short}`);
    await makeRepository(path, base);
    const row = await createRepository(db, ws.id, { name: base, path, default_branch: 'main', remote_slug: slug });
    return { id: row.id, name: base, path, slug };
  };
  const app = await repo('app', 'demo/app');
  const service = await repo('service', 'demo/service');

  const workflow = await createWorkflow(db, ws.id, {
    name: 'default',
    // `doing` admits one running agent at a time (the WIP gate at launch); the batch's tasks land in `todo`.
    steps: [{ name: 'todo' }, { name: 'doing', wip_limit: 1 }, { name: 'done' }],
  });
  const profile = await createAgentProfile(db, ws.id, {
    name: 'echo-agent',
    executor: { kind: 'local', command: AGENT_COMMAND },
  });
  for (const n of input.pullRequests) provider.addPullRequest(app.slug, n);
  for (const n of input.mergeRequests) provider.addMergeRequest(service.slug, n);
  const github = await createProviderConnection(db, ws.id, {
    provider: 'github',
    base_url: provider.githubBaseUrl,
    token: GITHUB_TOKEN,
  });
  const gitlab = await createProviderConnection(db, ws.id, {
    provider: 'gitlab',
    base_url: provider.gitlabBaseUrl,
    token: GITLAB_TOKEN,
  });
  const group = await createGroup(db, ws.id, { name: 'squad' });
  const env = await createSharedEnvironment(db, ws.id, { name: 'shared', repository_ids: [app.id, service.id] });
  const member = await issueToken(db, ws.id, { principal_id: MEMBER_PRINCIPAL, role: 'member' });
  const operator = input.adminTokenConfigured
    ? null
    : await issueToken(db, ws.id, { principal_id: OPERATOR_PRINCIPAL, role: 'operator' });

  let staged = 0;
  return {
    id: ws.id,
    name,
    app,
    service,
    workflowStepIds: workflow.steps.map((s) => s.id),
    agentProfileId: profile.id,
    githubConnectionId: github.id,
    gitlabConnectionId: gitlab.id,
    groupId: group.id,
    environmentId: env.id,
    memberToken: member.token,
    operatorToken: operator?.token ?? null,
    async stageFor(label, count) {
      const ids: string[] = [];
      for (let i = 0; i < count; i++) {
        staged += 1;
        const bytes = Buffer.from(`notes #${staged} for "${label}"\nstaged by taskledger demo at ${stamp}\n`, 'utf8');
        const a = await stageAttachment(db, { dataDir, workspaceId: ws.id, ownerPrincipalId: MEMBER_PRINCIPAL, bytes });
        ids.push(a.attachment_id);
      }
      return ids;
    },
  };
}
