/**
 * The rows of `workspace_attachment`, shared by its Store transaction, its
 * read-only observation and Complete's verifier (src/store/effects/
 * workspace-attachment.ts): the exact rows a request asks for, how to read
 * the world they live in, how to classify what was found, the success
 * observation, and the lock set (environment binding and environment 11.1,
 * environment repositories 11.2, group 12.1, blocker edges then members
 * 12.2, ascending key). Pure or read-only: no transaction, no writes.
 */
import type { WorkspaceAttachmentRequest } from '../../canonical/types';
import { TIER } from '../../db/lock-plan';
import type { EffectOwner, ObservedRow, OwnRow } from '../../store/effects/recording';
import {
  BINDING_COLUMNS,
  BLOCKER_COLUMNS,
  ENVIRONMENT_COLUMNS,
  GROUP_MEMBER_COLUMNS,
  readBlocker,
  readEnvironment,
  readEnvironmentBinding,
  readEnvironmentRepos,
  readGroupMember,
  rowHash,
  sameRow,
  type BlockerDoc,
  type EnvironmentBindingDoc,
  type EnvironmentDoc,
  type EnvironmentRepoDoc,
  type GroupMemberDoc,
} from '../../store/effects/row-documents';
import { rowRead, type LockNeed, type Reader } from '../../store/effects/row-locks';
type Req = WorkspaceAttachmentRequest;

export interface Expected {
  members: GroupMemberDoc[];
  blockers: BlockerDoc[];
  binding: EnvironmentBindingDoc | null;
}

/** The exact rows the request asks for, owned by this step. */
export function expectedAttachmentRows(req: Req, owner: EffectOwner): Expected {
  const ws = req.workspace_id;
  return {
    members:
      req.group_id === null
        ? []
        : req.member_ids.map((m) => ({
            group_id: req.group_id!,
            task_id: m,
            workspace_id: ws,
            role: 'member',
            ...owner,
          })),
    blockers: req.blocker_ids.map((b) => ({ task_id: req.task_id, blocker_task_id: b, workspace_id: ws, ...owner })),
    binding:
      req.environment_id === null
        ? null
        : { task_id: req.task_id, environment_id: req.environment_id, workspace_id: ws, ...owner },
  };
}

export interface World {
  groupOk: boolean;
  env: EnvironmentDoc | null;
  envRepos: EnvironmentRepoDoc[];
  binding: EnvironmentBindingDoc | null;
  members: (GroupMemberDoc | null)[];
  blockers: (BlockerDoc | null)[];
  missingBlockers: string[];
}

export async function readWorld(read: Reader, req: Req, exp: Expected): Promise<World> {
  // Independent reads, issued together: in a transaction they travel in one round trip (Tx.batch).
  const [g, env, envRepos, binding, members, blockers, live] = await Promise.all([
    req.group_id === null
      ? null
      : read<{ workspace_id: string }>(rowRead('workspace_groups', 'workspace_id', 'id = ?'), [req.group_id]),
    req.environment_id === null ? null : readEnvironment(read, req.environment_id),
    req.environment_id === null ? [] : readEnvironmentRepos(read, req.environment_id),
    // Without an environment the attachment expects no binding and checks none: nothing to read.
    req.environment_id === null ? null : readEnvironmentBinding(read, req.task_id),
    Promise.all(exp.members.map((m) => readGroupMember(read, m.group_id, m.task_id))),
    Promise.all(exp.blockers.map((b) => readBlocker(read, b.task_id, b.blocker_task_id))),
    req.blocker_ids.length === 0
      ? []
      : read<{ id: string }>(
          `SELECT id FROM tasks WHERE workspace_id = ? AND lifecycle_state <> 'deleted' AND id IN (${req.blocker_ids.map(() => '?').join(', ')})`,
          [req.workspace_id, ...req.blocker_ids],
        ),
  ]);
  const groupOk = g === null || g[0]?.workspace_id === req.workspace_id;
  const found = new Set(live.map((r) => String(r.id)));
  const missingBlockers = req.blocker_ids.filter((b) => !found.has(b));
  return {
    groupOk,
    env,
    envRepos,
    binding,
    members,
    blockers,
    missingBlockers,
  };
}

export type Presence = 'absent' | 'ours' | 'foreign';
export function presence(actual: unknown, expected: unknown): Presence {
  if (actual === null) return 'absent';
  return sameRow(actual, expected) ? 'ours' : 'foreign';
}

export function ownRows(exp: Expected, w: World): OwnRow<Presence>[] {
  const out: OwnRow<Presence>[] = [];
  exp.members.forEach((m, i) => {
    const a = w.members[i] ?? null;
    out.push({ table: 'workspace_group_members', key: `${m.group_id}:${m.task_id}`, actual: a, p: presence(a, m) });
  });
  exp.blockers.forEach((b, i) => {
    const a = w.blockers[i] ?? null;
    out.push({ table: 'task_blockers', key: `${b.task_id}:${b.blocker_task_id}`, actual: a, p: presence(a, b) });
  });
  if (exp.binding !== null) {
    out.push({
      table: 'task_environment_bindings',
      key: exp.binding.task_id,
      actual: w.binding,
      p: presence(w.binding, exp.binding),
    });
  }
  return out;
}

/** Why the world contradicts the request's references (null: it does not). */
export function referenceProblem(req: Req, w: World): { code: string; message: string; rows: ObservedRow[] } | null {
  if (!w.groupOk) {
    return {
      code: 'group_missing',
      message: 'the workspace group no longer exists in this workspace',
      rows: [{ table: 'workspace_groups', key: req.group_id!, row_sha256: null }],
    };
  }
  if (
    req.environment_id !== null &&
    (w.env === null || w.env.kind !== 'shared' || w.env.workspace_id !== req.workspace_id)
  ) {
    return {
      code: 'environment_missing',
      message: 'the shared environment no longer exists in this workspace',
      rows: [{ table: 'task_environments', key: req.environment_id, row_sha256: null }],
    };
  }
  if (w.missingBlockers.length > 0) {
    return {
      code: 'blocker_missing',
      message: 'a blocker task no longer exists in this workspace',
      rows: w.missingBlockers.map((b) => ({ table: 'tasks', key: b, row_sha256: null })),
    };
  }
  return null;
}

export function envReposMatch(req: Req, w: World): boolean {
  const ids = [...new Set(w.envRepos.map((r) => r.repository_id))].sort();
  return ids.length === w.envRepos.length && ids.join(',') === req.repository_ids.join(',');
}

export function observationOf(req: Req, owner: EffectOwner, generation: number, exp: Expected, w: World) {
  return {
    policy_mode: req.mode,
    group_member_rows: exp.members.map((m) => ({
      group_id: m.group_id,
      task_id: m.task_id,
      role: m.role,
      row_sha256: rowHash(m),
    })),
    blocker_rows: exp.blockers.map((b) => ({
      task_id: b.task_id,
      blocker_task_id: b.blocker_task_id,
      row_sha256: rowHash(b),
    })),
    environment_binding:
      exp.binding === null
        ? null
        : {
            environment_id: exp.binding.environment_id,
            task_id: exp.binding.task_id,
            row_sha256: rowHash(exp.binding),
          },
    environment_repo_rows: w.envRepos.map((r) => ({
      id: r.id,
      repository_id: r.repository_id,
      row_sha256: rowHash(r),
    })),
    owner_operation_id: owner.operation_id,
    step_generation: generation,
  };
}

export function lockNeeds(req: Req, envRepoIds: string[], exp: Expected, exclusive: boolean): LockNeed[] {
  const own = exclusive ? 'update' : 'share';
  const needs: LockNeed[] = [];
  if (req.environment_id !== null) {
    needs.push(
      {
        tier: TIER.ENVIRONMENT,
        table: 'task_environment_bindings',
        key: req.task_id,
        where: 'task_id = ?',
        params: [req.task_id],
        mode: own,
        reads: BINDING_COLUMNS,
      },
      {
        tier: TIER.ENVIRONMENT,
        table: 'task_environments',
        key: req.environment_id,
        where: 'id = ?',
        params: [req.environment_id],
        mode: 'share',
        reads: ENVIRONMENT_COLUMNS,
      },
    );
    for (const id of envRepoIds) {
      needs.push({
        tier: TIER.ENVIRONMENT_REPO,
        table: 'task_environment_repos',
        key: id,
        where: 'id = ?',
        params: [id],
        mode: 'share',
      });
    }
  }
  if (req.group_id !== null) {
    needs.push({
      tier: TIER.GROUP,
      table: 'workspace_groups',
      key: req.group_id,
      where: 'id = ?',
      params: [req.group_id],
      mode: 'share',
      reads: 'workspace_id',
    });
  }
  for (const b of exp.blockers) {
    needs.push({
      tier: TIER.GROUP_MEMBER,
      table: 'task_blockers',
      key: `${b.task_id}:${b.blocker_task_id}`,
      where: 'task_id = ? AND blocker_task_id = ?',
      params: [b.task_id, b.blocker_task_id],
      mode: own,
      reads: BLOCKER_COLUMNS,
    });
  }
  for (const m of exp.members) {
    needs.push({
      tier: TIER.GROUP_MEMBER,
      table: 'workspace_group_members',
      key: `${m.group_id}:${m.task_id}`,
      where: 'group_id = ? AND task_id = ?',
      params: [m.group_id, m.task_id],
      mode: own,
      reads: GROUP_MEMBER_COLUMNS,
    });
  }
  return needs;
}
