/**
 * What a deleted task leaves for the cleanup worker: one cleanup job per
 * effect still in the world, each with the complete canonical proof it acts
 * on (the shape of a compensation transfer, src/compensation/cleanup-proof.ts),
 * built under the deletion's locks (`DeletionJobBuilder`,
 * store/task-delete-locked.ts). SQL reads on the deletion's transaction
 * only; no I/O.
 *
 * Per effect:
 * - a succeeded step whose effect was neither compensated nor transferred:
 *   the rows the step wrote (re-derived from its request and owner, as its
 *   compensation would), each with its hash as it is NOW (a session row has
 *   moved on from `prepared`; the cleanup worker deletes a row only while it
 *   still has that hash) and `undone_sha256 = null` (deleted, never
 *   restored); rows already gone are left out. The `detail` names the world
 *   outside the ledger: the worktree (repository, path, branch, base commit,
 *   marker file), the provider marker comment, the attachment files;
 * - a dispatch claim that may have started an agent (`succeeded`,
 *   `running`, `unknown`): a `launch_dispatch` job owning the session's
 *   `executors_running` rows, with the dispatch key, the claim generation to
 *   fence and the host whose processes to stop.
 * The job reason is the deletion's (`task_deleted`, `workspace_deleted`); the
 * cleanup worker removes rather than restores for those reasons
 * (src/cleanup/worker.ts).
 */
import { parseCanonical } from '../canonical/canonical-json';
import type {
  AttachmentClaimRequest,
  FreshBranchPrepareRequest,
  RemoteContributionAssociateRequest,
  StepEvidence,
} from '../canonical/types';
import { cleanupProofOf, sortOwnedRows } from '../compensation/cleanup-proof';
import { freshBranchOwnedRows } from '../kinds/fresh-branch-prepare/compensation';
import { ownerOfClaim } from '../compensation/record';
import { associationDetail, associationOwnedRows } from '../kinds/remote-contribution-associate/compensation';
import { sessionOwnedRows } from '../kinds/session-prepare/compensation';
import { workspaceAttachmentOwnedRows } from '../kinds/workspace-attachment/compensation';
import type { Tx } from '../db/tx';
import { ownerHost } from '../launch/executor';
import { markerFileText } from '../kinds/fresh-branch-prepare/step';
import { claimedAttachmentPath, stagedAttachmentPath } from '../storage/paths';
import { currentRowHash, type OwnedRow } from '../store/effects/compensate-owned-rows';
import { readAttachment } from '../store/effects/row-documents';
import { txReader, type Reader } from '../store/effects/row-locks';
import { verifyStepRequest } from '../store/step-rows';
import type {
  CleanupJobSpec,
  DeletionInput,
  DeletionJobBuilder,
  DispatchRowForDeletion,
} from '../store/task-delete-locked';
import type { CompensationClaim, StepRow } from '../store/types';

/** The reasons a cleanup job removes what it owns instead of restoring it (a deleted task's effects). */
export const DELETION_REASONS: ReadonlySet<string> = new Set(['task_deleted', 'workspace_deleted']);

interface Spec {
  rows: OwnedRow[];
  detail: Record<string, unknown>;
}

/** The step as its compensation would see it: request, owner and evidence (no live claim is involved). */
function claimOf(step: StepRow, input: DeletionInput): CompensationClaim {
  return {
    operationId: step.operation_id,
    stepId: step.id,
    kind: step.kind,
    stepKey: step.step_key,
    compensationGeneration: step.compensation_generation,
    owner: 'deletion',
    leaseExpiresAt: new Date(0),
    request: verifyStepRequest(step, input.plan),
    requestSha256: step.request_sha256,
    idempotencyKey: step.idempotency_key,
    evidence: step.evidence_json === null ? null : (parseCanonical(step.evidence_json) as StepEvidence),
  };
}

function observation(claim: CompensationClaim): Record<string, unknown> {
  return claim.evidence?.effect === 'present_exact' ? claim.evidence.observation : {};
}

async function specOf(read: Reader, claim: CompensationClaim, dataDir: string): Promise<Spec | null> {
  const obs = observation(claim);
  switch (claim.kind) {
    case 'workspace_attachment':
      return { rows: workspaceAttachmentOwnedRows(claim), detail: {} };
    case 'session_prepare':
      return { rows: sessionOwnedRows(claim), detail: { session_id: claim.stepKey } };
    case 'fresh_branch_prepare': {
      const req = claim.request as FreshBranchPrepareRequest;
      if (typeof obs.worktree_path !== 'string') return null;
      const [repo] = await read<{ path: string }>('SELECT path FROM repositories WHERE id = ?', [req.repository_id]);
      return {
        rows: freshBranchOwnedRows(claim, obs.worktree_path),
        detail: {
          repository_path: repo?.path ?? null,
          worktree_path: obs.worktree_path,
          branch: req.branch,
          base_commit: req.base_commit,
          marker_file_text: markerFileText(req, ownerOfClaim(claim)),
          observed: null,
        },
      };
    }
    case 'remote_contribution_associate': {
      const req = claim.request as RemoteContributionAssociateRequest;
      const { association_row_sha256: rowSha, provider_handle: handle, ownership_marker: marker } = obs;
      if (typeof rowSha !== 'string' || typeof handle !== 'string' || typeof marker !== 'string') return null;
      return { rows: associationOwnedRows(req, rowSha), detail: associationDetail(req, marker, handle) };
    }
    case 'attachment_claim': {
      const req = claim.request as AttachmentClaimRequest;
      const files = [];
      for (const item of req.attachments) {
        const row = await readAttachment(read, item.attachment_id);
        files.push({
          attachment_id: item.attachment_id,
          staged_path: row?.storage_path ?? stagedAttachmentPath(dataDir, req.workspace_id, item.attachment_id),
          claimed_path: claimedAttachmentPath(dataDir, req.task_id, item.attachment_id),
          content_sha256: item.content_sha256,
          size: item.size,
        });
      }
      const rows = req.attachments.map((a) => ({
        table: 'task_message_attachments',
        key: a.attachment_id,
        row_sha256: '0'.repeat(64),
        undone_sha256: null,
      }));
      return { rows, detail: { attachments: files } };
    }
    case 'launch_intent':
      return null;
  }
}

/** Each row with its hash as it is now (deleted, not restored); rows already gone are left out. */
async function asTheyAre(read: Reader, rows: readonly OwnedRow[]): Promise<OwnedRow[]> {
  const out: OwnedRow[] = [];
  for (const r of rows) {
    const now = await currentRowHash(read, r.table, r.key);
    if (now !== null) out.push({ table: r.table, key: r.key, row_sha256: now, undone_sha256: null });
  }
  return sortOwnedRows(out);
}

/** The host whose processes the claim's agent runs on: the runtime handle's, else the claim's last owner's. */
function hostOf(d: DispatchRowForDeletion): string | null {
  const handle = d.runtime_handle === null ? null : (parseCanonical(d.runtime_handle) as { host?: unknown });
  if (typeof handle?.host === 'string') return handle.host;
  const owner =
    d.lease_owner ?? (d.error_json === null ? null : (parseCanonical(d.error_json) as { owner?: unknown }).owner);
  return typeof owner === 'string' ? ownerHost(owner) : null;
}

async function dispatchJob(read: Reader, input: DeletionInput, d: DispatchRowForDeletion): Promise<CleanupJobSpec> {
  const intent = input.steps.find((s) => s.kind === 'launch_intent' && s.step_key === d.session_id);
  const runtimes = await read<{ id: string }>('SELECT id FROM executors_running WHERE session_id = ? ORDER BY id', [
    d.session_id,
  ]);
  const rows = await asTheyAre(
    read,
    runtimes.map((r) => ({ table: 'executors_running', key: r.id, row_sha256: '0'.repeat(64), undone_sha256: null })),
  );
  const stepId = intent?.id ?? d.id;
  return {
    kind: 'launch_dispatch',
    stepId,
    proof: {
      version: 1,
      kind: 'launch_dispatch',
      operation_id: input.op.id,
      step_id: stepId,
      task_id: input.op.task_id,
      workspace_id: input.op.workspace_id,
      reason: input.reason,
      owned_rows: rows,
      detail: {
        dispatch_id: d.id,
        session_id: d.session_id,
        idempotency_key: d.idempotency_key,
        generation: d.generation,
        state: d.state,
        host: hostOf(d),
        lease_expires_at: d.lease_expires_at === null ? null : new Date(d.lease_expires_at).toISOString(),
      },
    },
  };
}

const MAY_HAVE_STARTED = new Set(['succeeded', 'running', 'unknown']);

export function deletionJobBuilder(dataDir: string): DeletionJobBuilder {
  return async (tx: Tx, input: DeletionInput): Promise<CleanupJobSpec[]> => {
    const read = txReader(tx);
    const jobs: CleanupJobSpec[] = [];
    for (const step of input.steps) {
      const undone = step.compensation_state === 'compensated' || step.compensation_state === 'transferred';
      if (step.kind === 'launch_intent' || step.state !== 'succeeded' || undone) continue;
      const claim = claimOf(step, input);
      const spec = await specOf(read, claim, dataDir);
      if (spec === null) continue;
      const rows = await asTheyAre(read, spec.rows);
      jobs.push({
        kind: step.kind,
        stepId: step.id,
        proof: { ...cleanupProofOf(claim, input.reason, rows, spec.detail) },
      });
    }
    for (const d of input.dispatches) {
      if (MAY_HAVE_STARTED.has(d.state)) jobs.push(await dispatchJob(read, input, d));
    }
    return jobs;
  };
}
