/**
 * The canonical proof a compensation transfer hands to a cleanup job
 * (`task_resource_cleanup_jobs.proof_json`, hashed by `cleanupProofHash`),
 * and its reader. The cleanup worker acts on nothing but this document and
 * what it re-observes.
 *
 * Shape (RFC 8785, closed):
 * `{version:1, kind, operation_id, step_id, task_id, workspace_id, reason,
 *   owned_rows:[OwnedRow] (sorted by table, key), detail:{...per kind}}`
 * - `owned_rows`: each effect row the step wrote, with the hash of the row as
 *   the step left it and the hash after the undo (null: deleted). The worker
 *   undoes a row only while its hash still equals `row_sha256`.
 * - `detail`, per kind:
 *   - `fresh_branch_prepare`: `{repository_path, worktree_path, branch,
 *     base_commit, marker_file_text, observed}` (Git as compensation saw it);
 *   - `remote_contribution_associate`: `{provider, connection_id,
 *     repository_id, contribution_kind, contribution_id, ownership_marker,
 *     provider_handle}`;
 *   - `attachment_claim`: `{attachments:[{attachment_id, staged_path,
 *     claimed_path, content_sha256, size}]}`;
 *   - `session_prepare`: `{session_id}`; `workspace_attachment`: `{}`;
 *   - `launch_dispatch` (a deleted task's agent, src/lifecycle/deletion-jobs.ts):
 *     `{dispatch_id, session_id, idempotency_key, generation, state, host,
 *     lease_expires_at}`.
 */
import { parseCanonical } from '../canonical/canonical-json';
import { compareCanonicalKeys } from '../canonical/sorted-lists';
import { STEP_KINDS, type StepKind } from '../domain/vocab';
import { ValidationError } from '../domain/errors';
import type { OwnedRow } from '../store/effects/compensate-owned-rows';
import type { CompensationClaim } from '../store/types';

/** A cleanup job owns one step kind's effect, or the agent of a launch dispatch (a deleted task's). */
export type CleanupKind = StepKind | 'launch_dispatch';

export interface CleanupProof {
  version: 1;
  kind: CleanupKind;
  operation_id: string;
  step_id: string;
  task_id: string;
  workspace_id: string;
  reason: string;
  owned_rows: OwnedRow[];
  detail: Record<string, unknown>;
}

export function sortOwnedRows(rows: readonly OwnedRow[]): OwnedRow[] {
  return [...rows].sort((a, b) => compareCanonicalKeys([a.table, a.key], [b.table, b.key]));
}

export function cleanupProofOf(
  claim: CompensationClaim,
  reason: string,
  rows: readonly OwnedRow[],
  detail: Record<string, unknown>,
): CleanupProof {
  const req = claim.request as { task_id: string; workspace_id: string };
  return {
    version: 1,
    kind: claim.kind,
    operation_id: claim.operationId,
    step_id: claim.stepId,
    task_id: req.task_id,
    workspace_id: req.workspace_id,
    reason: reason.slice(0, 200),
    owned_rows: sortOwnedRows(rows),
    detail,
  };
}

const isStr = (v: unknown): v is string => typeof v === 'string' && v.length > 0;
const isHash = (v: unknown): v is string => typeof v === 'string' && /^[0-9a-f]{64}$/.test(v);

/** Parses and checks a stored proof's envelope (per-kind detail is checked by its performer). */
export function parseCleanupProof(json: string): CleanupProof {
  const bad = (why: string) => new ValidationError('/proof_json', why, 'invalid_document');
  let doc: unknown;
  try {
    doc = parseCanonical(json);
  } catch (err) {
    throw bad(`not canonical JSON (${(err as Error).message})`);
  }
  const p = doc as Partial<CleanupProof>;
  const keys = Object.keys(p).sort().join(',');
  if (keys !== 'detail,kind,operation_id,owned_rows,reason,step_id,task_id,version,workspace_id') {
    throw bad(`unexpected fields: ${keys}`);
  }
  if (p.version !== 1 || ![...STEP_KINDS, 'launch_dispatch'].includes(p.kind as string)) throw bad('version or kind');
  for (const f of ['operation_id', 'step_id', 'task_id', 'workspace_id'] as const) {
    if (!isStr(p[f])) throw bad(`${f} missing`);
  }
  if (typeof p.reason !== 'string' || typeof p.detail !== 'object' || p.detail === null) throw bad('reason or detail');
  if (!Array.isArray(p.owned_rows)) throw bad('owned_rows');
  for (const r of p.owned_rows) {
    const ok =
      isStr(r.table) &&
      isStr(r.key) &&
      isHash(r.row_sha256) &&
      (r.undone_sha256 === null || isHash(r.undone_sha256)) &&
      Object.keys(r).length === 4;
    if (!ok) throw bad('owned row shape');
  }
  return p as CleanupProof;
}
