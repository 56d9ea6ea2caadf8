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
 * - `worktreePath(dataDir, workspaceId, taskId, segment)`:
 *   `path.join(dataDir, 'worktrees', workspace_id, task_id, segment)` (no
 *   trailing slash); `dataDir` must be absolute.
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

export function pathSha256(p: string): string {
  return createHash('sha256').update(Buffer.from(p, 'utf8')).digest('hex');
}
