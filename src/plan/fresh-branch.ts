/**
 * Names and places of fresh branches and worktrees (the `fresh_branch_prepare`
 * request fields that are derived, not requested).
 *
 * Contract:
 * - `sanitizeRepoName(name)`: a repository name reduced to one safe path
 *   segment and Git ref component: runs of characters outside `[A-Za-z0-9._-]`
 *   become `-`, `..` collapses to `.`, leading `.`/`-` and trailing `.`/`.lock`
 *   are stripped, at most 100 characters, `repo` if nothing is left. Repository
 *   names are free text (`varchar(200)`); this keeps a name like `../x` or
 *   `a b` from escaping the task directory or breaking the branch name.
 * - `worktreeSegments(repos)`: the segment per repository ID; repositories whose
 *   sanitized names collide get `-<repository_id>` appended, so no two
 *   worktrees of one task share a path.
 * - `freshBranchName(taskId, segment, freshCount)`: `taskledger/<task_id>` when
 *   the task has exactly one fresh-branch repository, else
 *   `taskledger/<task_id>/<segment>`.
 * - `worktreeRelativePath(workspaceId, taskId, repositoryId)`:
 *   `worktrees/<workspace_id>/<task_id>/<repository_id>` — the worktree's
 *   place under TASKLEDGER_DATA_DIR, from immutable IDs only, so the binding
 *   (`canonical_path_sha256`, its `pathSha256`) depends neither on a worker's
 *   configured data directory nor on a repository name an admin may change.
 *   The worktree lives at `path.join(dataDir, relative)`.
 * - `worktreePathMatches(path, req)`: an absolute worktree path is the one a
 *   request binds: its last four segments are the relative path whose hash is
 *   `canonical_path_sha256`, or (a plan written before this scheme) the whole
 *   path hashes to it.
 * - `worktreePath(dataDir, workspaceId, taskId, segment)`: the earlier
 *   scheme, `path.join(dataDir, 'worktrees', workspace_id, task_id,
 *   segment)` with a sanitized repository name, kept to find the worktrees of
 *   plans written before; `dataDir` must be absolute.
 * - `pathSha256(p)`: lowercase hex SHA-256 of the path's UTF-8 bytes (plain,
 *   no domain: it is `canonical_path_sha256`, a fingerprint of the path itself).
 */
import { createHash } from 'node:crypto';
import path from 'node:path';

const MAX_SEGMENT = 100;
const BAD_TAIL = /(?:\.lock|\.)$/;

export function sanitizeRepoName(name: string): string {
  let s = name
    .replace(/[^A-Za-z0-9._-]+/g, '-')
    .replace(/\.{2,}/g, '.')
    .replace(/^[.-]+/, '');
  s = s.slice(0, MAX_SEGMENT);
  while (BAD_TAIL.test(s)) s = s.replace(BAD_TAIL, '');
  return s === '' ? 'repo' : s;
}

export function worktreeSegments(repos: readonly { id: string; name: string }[]): Map<string, string> {
  const base = new Map(repos.map((r) => [r.id, sanitizeRepoName(r.name)] as const));
  const counts = new Map<string, number>();
  for (const seg of base.values()) counts.set(seg, (counts.get(seg) ?? 0) + 1);
  const out = new Map<string, string>();
  for (const [id, seg] of base) out.set(id, (counts.get(seg) ?? 0) > 1 ? `${seg}-${id}` : seg);
  return out;
}

export function freshBranchName(taskId: string, segment: string, freshCount: number): string {
  return freshCount === 1 ? `taskledger/${taskId}` : `taskledger/${taskId}/${segment}`;
}

export function worktreePath(dataDir: string, workspaceId: string, taskId: string, segment: string): string {
  if (!path.isAbsolute(dataDir)) throw new Error(`plan context dataDir must be absolute (got "${dataDir}")`);
  return path.join(dataDir, 'worktrees', workspaceId, taskId, segment);
}

export function worktreeRelativePath(workspaceId: string, taskId: string, repositoryId: string): string {
  return ['worktrees', workspaceId, taskId, repositoryId].join('/');
}

export function worktreePathMatches(
  p: string,
  req: { workspace_id: string; task_id: string; repository_id: string; canonical_path_sha256: string },
): boolean {
  const relative = worktreeRelativePath(req.workspace_id, req.task_id, req.repository_id);
  const tail = p.split(path.sep).slice(-4).join('/');
  return (
    (tail === relative && pathSha256(relative) === req.canonical_path_sha256) ||
    pathSha256(p) === req.canonical_path_sha256
  );
}

export function pathSha256(p: string): string {
  return createHash('sha256').update(Buffer.from(p, 'utf8')).digest('hex');
}
