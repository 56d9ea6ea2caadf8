/**
 * Validation and normalization of the create request body (design/API.md).
 *
 * Contract of `validateCreateRequest(raw)` → `CreateTaskRequest`:
 * - A non-object body (array, string, number, null) →
 *   `ValidationError('/', 'request body must be a JSON object')`.
 * - `external_id` is checked first, by `normalizeExternalId` (companion notes
 *   §2: the ID is validated and looked up before any other validation), with
 *   code `invalid_external_id`.
 * - Then the closed schema (`create-request-schema.ts`): unknown fields at any
 *   depth, wrong types, UUIDs that are not lowercase RFC 4122 (uppercase is
 *   rejected with a clear message, never silently lowercased), bad enums.
 * - Then semantics: title trimmed, 1..500 characters (code points), no control
 *   characters; description kept verbatim, at most 64 KiB of UTF-8, no NUL
 *   (PostgreSQL text cannot store it); `blocked_by` and `attachments` are
 *   deduplicated and sorted; a duplicate `repository_id` is rejected;
 *   `fresh_branch` defaults to true and `base_branch` to null; contributions pair
 *   github↔pull_request and gitlab↔merge_request, `contribution_id` is a string
 *   or a positive integer (normalized to its decimal string), duplicates (same
 *   provider, connection, kind and ID) are rejected, and the list is sorted by
 *   the step key `provider:connection_id:contribution_kind:contribution_id`;
 *   `start_agent` defaults to false; absent optionals become null; a task cannot
 *   block itself or be its own parent; the workspace policy's static rules
 *   (`checkWorkspacePolicyShape`).
 * - No string anywhere may hold a lone UTF-16 surrogate (no UTF-8 form exists).
 * Every error is a `ValidationError` whose `field` is the JSON pointer of the
 * offending value; code `invalid_request` unless stated. Repository order is
 * kept: it is the `task_repositories.position`.
 *
 * `validatedRequestDocument(req)` is the plain JSON document of a validated
 * request (every key present, null for absent); its `createRequestHash` is the
 * plan's `request_sha256`. Validating that document again yields the same request.
 */
import { PROVIDER_CONTRIBUTION_KIND } from '../canonical/schemas/step-requests';
import type { Uuid } from '../canonical/types';
import { ValidationError } from '../domain/errors';
import type { ContributionKind, Provider } from '../domain/vocab';
import { schemaError } from './create-request-schema';
import { normalizeExternalId } from './external-id';
import {
  assertWellFormed,
  cmp,
  normalizeContributionId,
  normalizeDescription,
  normalizeTitle,
  sortedUnique,
} from './fields';
import { checkWorkspacePolicyShape, type WorkspacePolicyRequest } from './workspace-policy';

export interface RepositoryRequest {
  repository_id: Uuid;
  /** Requested base branch; null → the repository's default branch. */
  base_branch: string | null;
  fresh_branch: boolean;
}

export interface ContributionRequest {
  provider: Provider;
  connection_id: Uuid;
  repository_id: Uuid;
  contribution_kind: ContributionKind;
  contribution_id: string;
}

export type { WorkspacePolicyRequest };

/** A validated, fully populated create request. */
export interface CreateTaskRequest {
  workspace_id: Uuid;
  title: string;
  description: string | null;
  external_id: string | null;
  task_id: Uuid | null;
  workflow_step_id: Uuid | null;
  parent_id: Uuid | null;
  /** Sorted, unique. */
  blocked_by: Uuid[];
  start_agent: boolean;
  agent_profile_id: Uuid | null;
  /** In request order (the position); unique by repository_id. */
  repositories: RepositoryRequest[];
  /** Sorted, unique. */
  attachments: Uuid[];
  /** Sorted by contribution step key; unique. */
  contributions: ContributionRequest[];
  workspace_policy: WorkspacePolicyRequest | null;
}

/** Same shape as `CreateTaskRequest`: the JSON document that is hashed. */
export type ValidatedCreateRequestDocument = CreateTaskRequest;

/** The step key of a contribution (also its identity for duplicate detection). */
export function contributionKey(c: ContributionRequest): string {
  return `${c.provider}:${c.connection_id}:${c.contribution_kind}:${c.contribution_id}`;
}

const PROVIDER_KIND: Readonly<Record<Provider, ContributionKind>> = PROVIDER_CONTRIBUTION_KIND;

interface RawRepository {
  repository_id: string;
  base_branch?: string | null;
  fresh_branch?: boolean;
}
interface RawContribution {
  provider: Provider;
  connection_id: string;
  repository_id: string;
  contribution_kind: ContributionKind;
  contribution_id: string | number;
}
/** The body after the schema passed (structure known, semantics unchecked). */
interface RawBody {
  workspace_id: string;
  title: string;
  description?: string | null;
  task_id?: string | null;
  workflow_step_id?: string | null;
  parent_id?: string | null;
  blocked_by?: string[];
  start_agent?: boolean;
  agent_profile_id?: string | null;
  repositories?: RawRepository[];
  attachments?: string[];
  contributions?: RawContribution[];
  workspace_policy?: {
    mode: WorkspacePolicyRequest['mode'];
    group_id?: string | null;
    environment_id?: string | null;
  } | null;
}

function normalizeRepositories(raw: RawRepository[]): RepositoryRequest[] {
  const seen = new Map<string, number>();
  return raw.map((r, i) => {
    const first = seen.get(r.repository_id);
    if (first !== undefined) {
      throw new ValidationError(
        `/repositories/${i}/repository_id`,
        `duplicate repository ${r.repository_id} (already at /repositories/${first})`,
      );
    }
    seen.set(r.repository_id, i);
    return { repository_id: r.repository_id, base_branch: r.base_branch ?? null, fresh_branch: r.fresh_branch ?? true };
  });
}

function normalizeContributions(raw: RawContribution[]): ContributionRequest[] {
  const seen = new Map<string, number>();
  const out = raw.map((c, i): ContributionRequest => {
    const at = `/contributions/${i}`;
    if (PROVIDER_KIND[c.provider] !== c.contribution_kind) {
      throw new ValidationError(
        `${at}/contribution_kind`,
        `a ${c.provider} contribution must be a ${PROVIDER_KIND[c.provider]} (got ${c.contribution_kind})`,
      );
    }
    const norm: ContributionRequest = {
      provider: c.provider,
      connection_id: c.connection_id,
      repository_id: c.repository_id,
      contribution_kind: c.contribution_kind,
      contribution_id: normalizeContributionId(c.contribution_id, `${at}/contribution_id`),
    };
    const key = contributionKey(norm);
    const first = seen.get(key);
    if (first !== undefined)
      throw new ValidationError(at, `duplicate contribution ${key} (already at /contributions/${first})`);
    seen.set(key, i);
    return norm;
  });
  return out.sort((a, b) => cmp(contributionKey(a), contributionKey(b)));
}

/** Validates and normalizes a raw create request body; see the file contract. */
export function validateCreateRequest(raw: unknown): CreateTaskRequest {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new ValidationError('/', 'request body must be a JSON object');
  }
  const externalId = normalizeExternalId((raw as Record<string, unknown>).external_id);
  const structural = schemaError(raw);
  if (structural) throw structural;
  assertWellFormed(raw, '');
  const body = raw as RawBody;

  const taskId = body.task_id ?? null;
  const parentId = body.parent_id ?? null;
  const blockedBy = sortedUnique(body.blocked_by ?? []);
  if (taskId !== null) {
    if (parentId === taskId) throw new ValidationError('/parent_id', 'a task cannot be its own parent');
    const self = (body.blocked_by ?? []).indexOf(taskId);
    if (self >= 0) throw new ValidationError(`/blocked_by/${self}`, 'a task cannot block itself');
  }
  const wp = body.workspace_policy ?? null;
  const workspacePolicy: WorkspacePolicyRequest | null =
    wp === null ? null : { mode: wp.mode, group_id: wp.group_id ?? null, environment_id: wp.environment_id ?? null };
  checkWorkspacePolicyShape(workspacePolicy, parentId);

  return {
    workspace_id: body.workspace_id,
    title: normalizeTitle(body.title),
    description: normalizeDescription(body.description),
    external_id: externalId,
    task_id: taskId,
    workflow_step_id: body.workflow_step_id ?? null,
    parent_id: parentId,
    blocked_by: blockedBy,
    start_agent: body.start_agent ?? false,
    agent_profile_id: body.agent_profile_id ?? null,
    repositories: normalizeRepositories(body.repositories ?? []),
    attachments: sortedUnique(body.attachments ?? []),
    contributions: normalizeContributions(body.contributions ?? []),
    workspace_policy: workspacePolicy,
  };
}

/** The plain JSON document of a validated request (a deep copy; every key present). */
export function validatedRequestDocument(req: CreateTaskRequest): ValidatedCreateRequestDocument {
  return {
    workspace_id: req.workspace_id,
    title: req.title,
    description: req.description,
    external_id: req.external_id,
    task_id: req.task_id,
    workflow_step_id: req.workflow_step_id,
    parent_id: req.parent_id,
    blocked_by: [...req.blocked_by],
    start_agent: req.start_agent,
    agent_profile_id: req.agent_profile_id,
    repositories: req.repositories.map((r) => ({
      repository_id: r.repository_id,
      base_branch: r.base_branch,
      fresh_branch: r.fresh_branch,
    })),
    attachments: [...req.attachments],
    contributions: req.contributions.map((c) => ({
      provider: c.provider,
      connection_id: c.connection_id,
      repository_id: c.repository_id,
      contribution_kind: c.contribution_kind,
      contribution_id: c.contribution_id,
    })),
    workspace_policy:
      req.workspace_policy === null
        ? null
        : {
            mode: req.workspace_policy.mode,
            group_id: req.workspace_policy.group_id,
            environment_id: req.workspace_policy.environment_id,
          },
  };
}
