/**
 * Resolves everything the pure plan builder needs, before Begin's transaction:
 * referenced rows (autocommit reads) and each repository's base commit (Git,
 * which is I/O and so never runs inside a transaction). A reference that does
 * not resolve is a ValidationError naming the request field; nothing is
 * written. Begin re-locks what must not change (workspace, parent, blockers)
 * inside its transaction.
 */
import { ValidationError } from '../domain/errors';
import { GitError, resolveCommit } from '../git/rev-parse';
import { readRows, type Db } from '../db/tx';
import type { CreateTaskRequest } from '../plan/create-request';
import type { PlanContext } from '../plan/build-plan';
import { parseCanonical } from '../canonical/canonical-json';
import { settledValue } from './settled';

export interface ContextDeps {
  dataDir: string;
  newId: () => string;
  resolveCommit?: (repoPath: string, ref: string) => Promise<string>;
  /** Settles once the caller is known and authorized: Git (a process per call) waits for it; the reads do not. */
  authorized?: Promise<unknown>;
}

function placeholders(n: number): string {
  return Array.from({ length: n }, () => '?').join(', ');
}

/**
 * Default placement: the first step of the workspace's oldest workflow. The workspace's steps are read through
 * `ix_workflow_steps_workspace` (migration 14), not by a scan of every workspace's.
 */
export const DEFAULT_PLACEMENT_SQL = `SELECT s.id, s.workflow_id FROM workflow_steps s JOIN workflows w ON w.id = s.workflow_id
      WHERE s.workspace_id = ? ORDER BY w.created_at, w.id, s.position LIMIT 1`;

async function resolveWorkflow(db: Db, req: CreateTaskRequest): Promise<PlanContext['workflow']> {
  if (req.workflow_step_id !== null) {
    const rows = await readRows<{ id: string; workflow_id: string }>(
      db,
      'SELECT id, workflow_id FROM workflow_steps WHERE id = ? AND workspace_id = ?',
      [req.workflow_step_id, req.workspace_id],
    );
    const row = rows[0];
    if (!row) throw new ValidationError('/workflow_step_id', 'unknown workflow step in this workspace');
    return { workflow_id: row.workflow_id, workflow_step_id: row.id };
  }
  const rows = await readRows<{ id: string; workflow_id: string }>(db, DEFAULT_PLACEMENT_SQL, [req.workspace_id]);
  const row = rows[0];
  return row ? { workflow_id: row.workflow_id, workflow_step_id: row.id } : null;
}

async function resolveParent(db: Db, req: CreateTaskRequest): Promise<PlanContext['parent']> {
  if (req.parent_id === null) return null;
  const rows = await readRows<{ id: string; creation_state: string }>(
    db,
    "SELECT id, creation_state FROM tasks WHERE id = ? AND workspace_id = ? AND lifecycle_state <> 'deleted'",
    [req.parent_id, req.workspace_id],
  );
  // Only a settled task is a parent: one still being created may yet abort, and its child would dangle.
  if (!rows[0] || rows[0].creation_state !== 'completed') {
    throw new ValidationError('/parent_id', 'unknown parent task in this workspace (or one still being created)');
  }
  const group = await readRows<{ group_id: string }>(
    db,
    'SELECT group_id FROM workspace_group_members WHERE task_id = ? ORDER BY group_id',
    [req.parent_id],
  );
  const env = await readRows<{ environment_id: string }>(
    db,
    'SELECT environment_id FROM task_environment_bindings WHERE task_id = ?',
    [req.parent_id],
  );
  return { id: req.parent_id, group_id: group[0]?.group_id ?? null, environment_id: env[0]?.environment_id ?? null };
}

async function resolveBlockers(db: Db, req: CreateTaskRequest): Promise<void> {
  if (req.blocked_by.length === 0) return;
  const rows = await readRows<{ id: string }>(
    db,
    `SELECT id FROM tasks WHERE workspace_id = ? AND lifecycle_state <> 'deleted' AND creation_state = 'completed'
        AND id IN (${placeholders(req.blocked_by.length)})`,
    [req.workspace_id, ...req.blocked_by],
  );
  const found = new Set(rows.map((r) => r.id));
  req.blocked_by.forEach((id, i) => {
    // Only a settled task blocks: one still being created may yet abort, and a start waiting on it would never start.
    if (!found.has(id)) {
      throw new ValidationError(
        `/blocked_by/${i}`,
        `unknown task ${id} in this workspace (or one still being created)`,
      );
    }
  });
}

async function resolveEnvironments(
  db: Db,
  req: CreateTaskRequest,
  parent: PlanContext['parent'],
): Promise<PlanContext['environments']> {
  const ids = [req.workspace_policy?.environment_id ?? null, parent?.environment_id ?? null].filter(
    (v): v is string => v !== null,
  );
  const out: PlanContext['environments'] = {};
  for (const id of [...new Set(ids)]) {
    const env = await readRows<{ id: string }>(
      db,
      "SELECT id FROM task_environments WHERE id = ? AND workspace_id = ? AND kind = 'shared'",
      [id, req.workspace_id],
    );
    if (!env[0]) {
      if (req.workspace_policy?.environment_id === id) {
        throw new ValidationError('/workspace_policy/environment_id', 'unknown shared environment in this workspace');
      }
      continue;
    }
    const repos = await readRows<{ repository_id: string }>(
      db,
      'SELECT repository_id FROM task_environment_repos WHERE environment_id = ? ORDER BY repository_id',
      [id],
    );
    out[id] = { id, repository_ids: repos.map((r) => r.repository_id) };
  }
  return out;
}

async function resolveGroups(db: Db, req: CreateTaskRequest, parent: PlanContext['parent']): Promise<string[]> {
  const ids = [req.workspace_policy?.group_id ?? null, parent?.group_id ?? null].filter((v): v is string => v !== null);
  if (ids.length === 0) return [];
  const rows = await readRows<{ id: string }>(
    db,
    `SELECT id FROM workspace_groups WHERE workspace_id = ? AND id IN (${placeholders(ids.length)})`,
    [req.workspace_id, ...ids],
  );
  const found = rows.map((r) => r.id);
  const wanted = req.workspace_policy?.group_id;
  if (wanted && !found.includes(wanted)) {
    throw new ValidationError('/workspace_policy/group_id', 'unknown workspace group in this workspace');
  }
  return found;
}

async function resolveRepositories(
  db: Db,
  req: CreateTaskRequest,
  deps: ContextDeps,
): Promise<PlanContext['repositories']> {
  const out: PlanContext['repositories'] = {};
  const commitOf = deps.resolveCommit ?? resolveCommit;
  for (const [i, r] of req.repositories.entries()) {
    const rows = await readRows<{ id: string; name: string; path: string; default_branch: string }>(
      db,
      'SELECT id, name, path, default_branch FROM repositories WHERE id = ? AND workspace_id = ?',
      [r.repository_id, req.workspace_id],
    );
    const repo = rows[0];
    if (!repo) throw new ValidationError(`/repositories/${i}/repository_id`, 'unknown repository in this workspace');
    const ref = r.base_branch ?? repo.default_branch;
    let baseCommit: string;
    await deps.authorized;
    try {
      baseCommit = await commitOf(repo.path, ref);
    } catch (err) {
      if (err instanceof GitError) {
        const field =
          err.reason === 'unknown_ref' ? `/repositories/${i}/base_branch` : `/repositories/${i}/repository_id`;
        throw new ValidationError(field, err.message);
      }
      throw err;
    }
    out[repo.id] = { ...repo, base_commit: baseCommit };
  }
  for (const [i, c] of req.contributions.entries()) {
    const field = `/contributions/${i}`;
    if (!out[c.repository_id]) {
      // Every registered repository is a local Git checkout; the builder knows it by its default branch.
      const rows = await readRows<{ id: string; name: string; path: string; default_branch: string }>(
        db,
        'SELECT id, name, path, default_branch FROM repositories WHERE id = ? AND workspace_id = ?',
        [c.repository_id, req.workspace_id],
      );
      const repo = rows[0];
      if (!repo) throw new ValidationError(`${field}/repository_id`, 'unknown repository in this workspace');
      await deps.authorized;
      try {
        out[repo.id] = { ...repo, base_commit: await commitOf(repo.path, repo.default_branch) };
      } catch (err) {
        if (err instanceof GitError) throw new ValidationError(`${field}/repository_id`, err.message);
        throw err;
      }
    }
    const conn = await readRows<{ provider: string }>(
      db,
      'SELECT provider FROM provider_connections WHERE id = ? AND workspace_id = ?',
      [c.connection_id, req.workspace_id],
    );
    if (!conn[0]) throw new ValidationError(`${field}/connection_id`, 'unknown provider connection in this workspace');
    if (conn[0].provider !== c.provider) {
      throw new ValidationError(`${field}/provider`, `connection is for ${conn[0].provider}, not ${c.provider}`);
    }
  }
  return out;
}

async function resolveAttachments(db: Db, req: CreateTaskRequest): Promise<PlanContext['attachments']> {
  if (req.attachments.length === 0) return {};
  const rows = await readRows<{ id: string; staging_owner_id: string; content_sha256: string; size: string | number }>(
    db,
    `SELECT id, staging_owner_id, content_sha256, size FROM task_message_attachments
      WHERE workspace_id = ? AND owner_kind = 'staging' AND id IN (${placeholders(req.attachments.length)})`,
    [req.workspace_id, ...req.attachments],
  );
  const out: PlanContext['attachments'] = {};
  for (const r of rows) out[r.id] = { ...r, size: Number(r.size) };
  req.attachments.forEach((id, i) => {
    if (!out[id])
      throw new ValidationError(`/attachments/${i}`, 'unknown or already claimed attachment in this workspace');
  });
  return out;
}

async function resolveAgentProfile(db: Db, req: CreateTaskRequest): Promise<PlanContext['agentProfile']> {
  if (req.agent_profile_id === null) return null;
  const rows = await readRows<{ id: string; executor_kind: 'local'; executor_json: string }>(
    db,
    'SELECT id, executor_kind, executor_json FROM agent_profiles WHERE id = ? AND workspace_id = ?',
    [req.agent_profile_id, req.workspace_id],
  );
  const row = rows[0];
  if (!row) throw new ValidationError('/agent_profile_id', 'unknown agent profile in this workspace');
  return {
    id: row.id,
    executor_kind: row.executor_kind,
    executor: parseCanonical(row.executor_json) as Record<string, unknown>,
  };
}

export async function resolvePlanContext(
  db: Db,
  req: CreateTaskRequest,
  taskId: string,
  deps: ContextDeps,
): Promise<PlanContext> {
  // Independent reads run together (environments and groups follow the parent they may inherit from); the
  // results are taken in this order, so a request with several bad references gets the first one's error.
  const parentRead = resolveParent(db, req);
  const [wf, par, blk, envs, grp, repos, att, prof] = await Promise.allSettled([
    resolveWorkflow(db, req),
    parentRead,
    resolveBlockers(db, req),
    parentRead.then((p) => resolveEnvironments(db, req, p)),
    parentRead.then((p) => resolveGroups(db, req, p)),
    resolveRepositories(db, req, deps),
    resolveAttachments(db, req),
    resolveAgentProfile(db, req),
  ]);
  const workflow = settledValue(wf);
  const parent = settledValue(par);
  settledValue(blk);
  const environments = settledValue(envs);
  const groups = settledValue(grp);
  const repositories = settledValue(repos);
  const attachments = settledValue(att);
  const agentProfile = settledValue(prof);
  return {
    taskId,
    workspaceId: req.workspace_id,
    workflow,
    parent,
    environments,
    groups,
    repositories,
    attachments,
    agentProfile,
    dataDir: deps.dataDir,
    newId: deps.newId,
  };
}
