/**
 * Builds closed-schema evidence documents the way a step worker would, for
 * Store tests that record results without running the real effects.
 */
import { createHash } from 'node:crypto';
import type { StepEvidence, StepFailure } from '../../src/canonical/types';
import type { StepKind } from '../../src/domain/vocab';
import type { StepClaim } from '../../src/store/types';

const h = (s: string) => createHash('sha256').update(s).digest('hex');

export function observedAt(): string {
  return new Date().toISOString();
}

function presentObservation(claim: StepClaim): Record<string, unknown> {
  const r = claim.request as unknown as Record<string, unknown>;
  const kind: StepKind = claim.kind;
  switch (kind) {
    case 'workspace_attachment':
      return {
        policy_mode: r.mode,
        group_member_rows: [],
        blocker_rows: (r.blocker_ids as string[]).map((b) => ({
          task_id: r.task_id,
          blocker_task_id: b,
          row_sha256: h(`blk${b}`),
        })),
        environment_binding: null,
        environment_repo_rows: [],
        owner_operation_id: claim.operationId,
        step_generation: claim.generation,
      };
    case 'attachment_claim':
      return {
        operation_id: claim.operationId,
        attachments: (r.attachments as Record<string, unknown>[]).map((a) => ({
          attachment_id: a.attachment_id,
          prior_owner_kind: 'staging',
          staging_owner_id: a.staging_owner_id,
          current_owner_kind: 'task',
          task_id: r.task_id,
          content_sha256: a.content_sha256,
          size: a.size,
          row_sha256: h(`att${String(a.attachment_id)}`),
        })),
      };
    case 'fresh_branch_prepare':
      return {
        worktree_path: `/tmp/wt/${String(r.task_environment_repo_id)}`,
        canonical_path_sha256: r.canonical_path_sha256,
        branch: r.branch,
        head_commit: r.base_commit,
        base_commit: r.base_commit,
        registered: true,
        marker: {
          operation_id: claim.operationId,
          step_id: claim.stepId,
          resource_key: r.resource_key,
          marker_sha256: h('marker'),
        },
        environment_repo_row_sha256: h('envrepo'),
      };
    case 'remote_contribution_associate':
      return {
        association_row_sha256: h('assoc'),
        provider_handle: 'pr-1',
        provider_response_sha256: h('resp'),
        idempotency_key: claim.idempotencyKey,
        ownership_marker: h('owner'),
      };
    case 'session_prepare':
      return {
        session_row_sha256: h('session'),
        resource_markers: (r.resource_keys as string[]).map((k) => ({ resource_key: k, marker_sha256: h(k) })),
        runtime_absent: true,
      };
    case 'launch_intent':
      return { intent_sha256: claim.requestSha256, dispatched: false };
  }
}

export function presentEvidence(claim: StepClaim): StepEvidence {
  return {
    version: 1,
    kind: claim.kind,
    step_key: claim.stepKey,
    request_sha256: claim.requestSha256,
    observation: presentObservation(claim),
    observed_at: observedAt(),
    effect: 'present_exact',
  };
}

export function absentEvidence(
  claim: Pick<StepClaim, 'kind' | 'stepKey' | 'requestSha256'>,
  reason = 'nothing was created',
): StepEvidence {
  return {
    version: 1,
    kind: claim.kind,
    step_key: claim.stepKey,
    request_sha256: claim.requestSha256,
    observation: { reason, rows: [] },
    observed_at: observedAt(),
    effect: 'absent_proven',
  };
}

export function permanentFailure(claim: StepClaim, code = 'provider_rejected'): StepFailure {
  return { class: 'permanent', code, message: 'the provider refused the request', evidence: absentEvidence(claim) };
}

export function transientFailure(claim: StepClaim): StepFailure {
  return { class: 'transient', code: 'provider_unavailable', message: 'HTTP 503', evidence: absentEvidence(claim) };
}

export function ambiguousFailure(): StepFailure {
  return { class: 'ambiguous', code: 'timeout', message: 'request timed out after sending', evidence: null };
}
