/**
 * Registering a local Git repository in a workspace.
 *
 * `checkLocalRepository` is I/O (the Git CLI) and runs before, never inside,
 * the transaction: the path must be absolute and a Git repository
 * (`git -C path rev-parse --git-dir`), and the default branch must exist as a
 * local branch. `createRepository` then locks the workspace (tier 1, shared)
 * and inserts the row (with its optional provider `remote_slug`); a duplicate name in the workspace is a 400 on `/name`.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { isAbsolute } from 'node:path';
import { promisify } from 'node:util';
import { ValidationError } from '../domain/errors';
import { uniqueViolationConstraint } from '../db/dialect';
import { runTransaction, type Db } from '../db/tx';
import { lockActiveWorkspaceLocked } from './workspaces';

const run = promisify(execFile);

/** Why 10 s: both checks take milliseconds on a local disk; a hung mount must not hold a request forever. */
const GIT_TIMEOUT_MS = 10_000;

export interface RepositoryInput {
  name: string;
  path: string;
  default_branch: string;
  remote_slug?: string | null;
}

export interface RepositoryRow {
  id: string;
  workspace_id: string;
  name: string;
  path: string;
  default_branch: string;
  /** The provider-side identity (GitHub `owner/repo`, GitLab project path); null without a provider remote. */
  remote_slug: string | null;
}

/** Proves `path` is a local Git repository holding `branch`; a ValidationError names the failing field. */
export async function checkLocalRepository(path: string, branch: string): Promise<void> {
  if (!isAbsolute(path)) throw new ValidationError('/path', 'must be an absolute path');
  try {
    const { stdout } = await run('git', ['-C', path, 'rev-parse', '--git-dir'], { timeout: GIT_TIMEOUT_MS });
    if (!stdout.trim()) throw new Error('empty --git-dir');
  } catch {
    throw new ValidationError('/path', `${path} is not a local Git repository`);
  }
  try {
    await run('git', ['-C', path, 'rev-parse', '--verify', '--quiet', `refs/heads/${branch}^{commit}`], {
      timeout: GIT_TIMEOUT_MS,
    });
  } catch {
    throw new ValidationError('/default_branch', `branch ${branch} does not exist in ${path}`);
  }
}

export async function createRepository(db: Db, workspaceId: string, input: RepositoryInput): Promise<RepositoryRow> {
  await checkLocalRepository(input.path, input.default_branch);
  const id = randomUUID();
  const remoteSlug = input.remote_slug ?? null;
  try {
    await runTransaction(db, 'CreateRepository', async (tx) => {
      await lockActiveWorkspaceLocked(tx, workspaceId);
      await tx.exec(
        `INSERT INTO repositories (id, workspace_id, name, path, default_branch, remote_slug, created_at) VALUES (?, ?, ?, ?, ?, ?, ${tx.now})`,
        [id, workspaceId, input.name, input.path, input.default_branch, remoteSlug],
      );
    });
  } catch (err) {
    if (uniqueViolationConstraint(err) === 'uq_repositories_workspace_name') {
      throw new ValidationError('/name', `a repository named ${input.name} already exists in this workspace`);
    }
    throw err;
  }
  return {
    id,
    workspace_id: workspaceId,
    name: input.name,
    path: input.path,
    default_branch: input.default_branch,
    remote_slug: remoteSlug,
  };
}
