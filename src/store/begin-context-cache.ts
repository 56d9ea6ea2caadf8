/**
 * What Begin read before its transaction, remembered per process as a guess the transaction checks (ADR 0052).
 *
 * A create request of the common shape (no parent, blockers, repositories, contributions, attachments or
 * environment) needs five reads before its plan can be built: the caller's token, the workspace's state, the
 * placement, the group and the agent profile. They change rarely (setup writes them), so the answers of the last
 * fresh reads are kept here, and a request whose every reference is known builds its plan from them with no read.
 * One with an external ID is still admitted and looked up afresh first (companion notes §2's order), and only its
 * plan comes from memory.
 *
 * Nothing is trusted. Begin's transaction checks each remembered fact on the server: its own fences cover the
 * workspace active, the token's authority current and the placement's step in the workspace; one more
 * (`contextFence`, a plain read, so no lock and no tier) covers the token's secret, the group, the profile's
 * executor document byte for byte, and the default placement still the default. A fact that no longer holds fails
 * its fence before COMMIT: nothing is written, every entry the request used is forgotten, and Begin starts over
 * from fresh reads, which give the same answer, refusal or error as without this memory. A plan from memory thus
 * rests on facts true in the transaction that writes it. Bounded: the oldest entries of a kind go first.
 */
import type { Db, SqlParam, Statement } from '../db/tx';
import type { CreateTaskRequest } from '../plan/create-request';
import type { AgentProfileInfo, PlanContext } from '../plan/build-plan';
import { canonicalJson } from '../canonical/canonical-json';
import { deepFreeze } from './binding-cache';
import { DEFAULT_PLACEMENT_SQL } from './begin-context';
import type { Principal } from './types';

/** Entries per kind of fact. A process serves a few workspaces' setup rows; 256 of each is far more than that. */
export const CONTEXT_CACHE_CAPACITY = 256;

/** The agent profile as read: its parsed executor and the exact stored text the fence compares. */
interface ProfileFact {
  info: AgentProfileInfo;
  executorText: string;
}

/** A remembered context: the plan's inputs, and the fence that checks them all in Begin's transaction. */
export interface CachedContext {
  ctx: PlanContext;
  fence: Statement;
}

class Bounded<V> {
  private readonly entries = new Map<string, V>();
  constructor(private readonly capacity: number) {}
  get(key: string): V | undefined {
    return this.entries.get(key);
  }
  has(key: string): boolean {
    return this.entries.has(key);
  }
  set(key: string, value: V): void {
    this.entries.delete(key);
    this.entries.set(key, value);
    if (this.entries.size > this.capacity) this.entries.delete(this.entries.keys().next().value as string);
  }
  delete(key: string): void {
    this.entries.delete(key);
  }
  get size(): number {
    return this.entries.size;
  }
}

const key = (...parts: string[]) => parts.join('\u0000');

/** True for the request shapes whose whole context this memory can answer (the rest always read fresh). */
export function cacheableShape(req: CreateTaskRequest): boolean {
  return (
    req.parent_id === null &&
    req.blocked_by.length === 0 &&
    req.repositories.length === 0 &&
    req.contributions.length === 0 &&
    req.attachments.length === 0 &&
    (req.workspace_policy?.environment_id ?? null) === null
  );
}

function groupOf(req: CreateTaskRequest): string | null {
  return req.workspace_policy?.group_id ?? null;
}

export class BeginContextCache {
  private readonly principals: Bounded<Principal>;
  private readonly workspaces: Bounded<true>;
  private readonly placements: Bounded<PlanContext['workflow']>;
  private readonly groups: Bounded<true>;
  private readonly profiles: Bounded<ProfileFact>;

  constructor(capacity = CONTEXT_CACHE_CAPACITY) {
    this.principals = new Bounded(capacity);
    this.workspaces = new Bounded(capacity);
    this.placements = new Bounded(capacity);
    this.groups = new Bounded(capacity);
    this.profiles = new Bounded(capacity);
  }

  /** The principal last read for this token (by its SHA-256), if any. */
  principal(tokenSha256: string): Principal | undefined {
    return this.principals.get(tokenSha256);
  }

  /**
   * The request's whole context from memory, with the fence that checks it, or null when some fact is not known
   * (or the shape is not cacheable). `tokenSha256` is the caller's token when its principal came from here.
   */
  context(
    req: CreateTaskRequest,
    principal: Principal,
    tokenSha256: string | null,
    base: Pick<PlanContext, 'taskId' | 'dataDir' | 'newId'>,
  ): CachedContext | null {
    if (!cacheableShape(req)) return null;
    const ws = req.workspace_id;
    if (!this.workspaces.has(ws)) return null;
    const placementKey = key(ws, req.workflow_step_id ?? '');
    const workflow = this.placements.get(placementKey);
    if (workflow === undefined) return null;
    const group = groupOf(req);
    if (group !== null && !this.groups.has(key(ws, group))) return null;
    let profile: ProfileFact | null = null;
    if (req.agent_profile_id !== null) {
      profile = this.profiles.get(key(ws, req.agent_profile_id)) ?? null;
      if (profile === null) return null;
    }
    const ctx: PlanContext = {
      taskId: base.taskId,
      workspaceId: ws,
      workflow,
      parent: null,
      environments: {},
      groups: group === null ? [] : [group],
      repositories: {},
      attachments: {},
      agentProfile: profile?.info ?? null,
      dataDir: base.dataDir,
      newId: base.newId,
    };
    return { ctx, fence: contextFence(req, workflow, profile, principal, tokenSha256) };
  }

  /**
   * Records what fresh reads answered for a request that passed them (the caller admitted, the workspace active,
   * every reference resolved): `tokenSha256` when the principal was read by its token.
   */
  remember(req: CreateTaskRequest, ctx: PlanContext, principal: Principal, tokenSha256: string | null): void {
    if (!cacheableShape(req)) return;
    const ws = req.workspace_id;
    if (tokenSha256 !== null) this.principals.set(tokenSha256, deepFreeze({ ...principal }));
    this.workspaces.set(ws, true);
    this.placements.set(
      key(ws, req.workflow_step_id ?? ''),
      ctx.workflow === null ? null : deepFreeze({ ...ctx.workflow }),
    );
    const group = groupOf(req);
    if (group !== null && ctx.groups.includes(group)) this.groups.set(key(ws, group), true);
    const profile = ctx.agentProfile;
    if (req.agent_profile_id !== null && profile !== null && profile.id === req.agent_profile_id) {
      this.profiles.set(key(ws, profile.id), {
        info: deepFreeze({ ...profile, executor: structuredClone(profile.executor) }),
        executorText: canonicalJson(profile.executor),
      });
    }
  }

  /** Drops every fact this request's context was built from (a fence found one no longer true). */
  forget(req: CreateTaskRequest, tokenSha256: string | null): void {
    const ws = req.workspace_id;
    if (tokenSha256 !== null) this.principals.delete(tokenSha256);
    this.workspaces.delete(ws);
    this.placements.delete(key(ws, req.workflow_step_id ?? ''));
    const group = groupOf(req);
    if (group !== null) this.groups.delete(key(ws, group));
    if (req.agent_profile_id !== null) this.profiles.delete(key(ws, req.agent_profile_id));
  }

  /** Entries held, all kinds together (tests). */
  get size(): number {
    return this.principals.size + this.workspaces.size + this.placements.size + this.groups.size + this.profiles.size;
  }
}

/**
 * One plain read that answers one row exactly when every remembered fact the transaction's other fences do not
 * cover still holds: the token's secret (its authority's revision and revocation are fenced already), the group,
 * the profile's executor kind and document byte for byte, the placement (an explicit step's workflow; the default
 * still the workspace's first step, or still none).
 */
function contextFence(
  req: CreateTaskRequest,
  workflow: PlanContext['workflow'],
  profile: ProfileFact | null,
  principal: Principal,
  tokenSha256: string | null,
): Statement {
  const ws = req.workspace_id;
  const where: string[] = ['id = ?'];
  const params: SqlParam[] = [ws];
  if (tokenSha256 !== null) {
    where.push('EXISTS (SELECT 1 FROM api_tokens WHERE id = ? AND token_sha256 = ?)');
    params.push(principal.authority_id, tokenSha256);
  }
  const group = groupOf(req);
  if (group !== null) {
    where.push('EXISTS (SELECT 1 FROM workspace_groups WHERE id = ? AND workspace_id = ?)');
    params.push(group, ws);
  }
  if (profile !== null) {
    where.push(
      'EXISTS (SELECT 1 FROM agent_profiles WHERE id = ? AND workspace_id = ? AND executor_kind = ? AND executor_json = ?)',
    );
    params.push(profile.info.id, ws, profile.info.executor_kind, profile.executorText);
  }
  if (req.workflow_step_id !== null) {
    where.push('EXISTS (SELECT 1 FROM workflow_steps WHERE id = ? AND workspace_id = ? AND workflow_id = ?)');
    params.push(req.workflow_step_id, ws, workflow?.workflow_id ?? null);
  } else if (workflow === null) {
    where.push(`NOT EXISTS (${DEFAULT_PLACEMENT_SQL})`);
    params.push(ws);
  } else {
    where.push(`(SELECT d.id FROM (${DEFAULT_PLACEMENT_SQL}) d) = ?`);
    params.push(ws, workflow.workflow_step_id);
  }
  return { sql: `SELECT 1 AS fresh FROM workspaces WHERE ${where.join(' AND ')}`, params };
}

/** Where Begin's plans came from in this process: memory, fresh reads, or memory that a fence found stale. */
export type ContextSource = 'memory' | 'fresh' | 'stale';
const sources: Record<ContextSource, number> = { memory: 0, fresh: 0, stale: 0 };

/** Counts one plan's context by its source (read at scrape time: `taskledger_begin_context_total`). */
export function countContext(source: ContextSource): void {
  sources[source]++;
}

/** This process's counts since it started. */
export function contextCounts(): Readonly<Record<ContextSource, number>> {
  return { ...sources };
}

const caches = new WeakMap<Db, BeginContextCache>();

/** This process's memory for one database. */
export function contextCacheOf(db: Db): BeginContextCache {
  let cache = caches.get(db);
  if (!cache) {
    cache = new BeginContextCache();
    caches.set(db, cache);
  }
  return cache;
}
