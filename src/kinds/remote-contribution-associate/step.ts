/**
 * Step handler `remote_contribution_associate`: links a GitHub pull request
 * or GitLab merge request to the task with a marker comment.
 *
 * perform (a live claim):
 * 1. `claimContributionAssociation` commits the operation-owned association
 *    row (or records a permanent failure: contribution held by another task,
 *    connection/repository unusable) — before any provider call, because
 *    comments have no native idempotency.
 * 2. Outside any transaction: an authenticated read of the contribution,
 *    heartbeat, then `ensureLinkComment` with the row's ownership marker
 *    (finds an earlier comment carrying it; creates one otherwise).
 * 3. `recordContributionAssociation` stores the handle and records success.
 * Provider failures: permanent -> `failed`, transient -> `retry_wait`, both
 * after deleting our row in the recording transaction (nothing was posted);
 * ambiguous (or anything unrecognised) -> `unknown`, keeping the row — it is
 * the immutable handle recovery reconciles by. A stale claim throws before
 * any I/O.
 *
 * observe (read-only): our exact locked row plus the provider showing the
 * marker comment -> `present_exact`; no row and no marker comment, or our
 * claimed row that never got a handle and no marker comment (a worker died
 * or timed out before the comment landed) -> `absent_proven`, so the step
 * retries with the same marker; the provider answering 404/410 for the
 * contribution (it does not exist, so no marker comment can) -> also
 * `absent_proven`: the retry then fails permanently and the creation aborts.
 * Credential loss (401/403), an unreachable or failing provider (5xx,
 * timeout, refused) or an unusable connection -> `unobservable` (nothing
 * proven; recovery looks again with backoff). Anything else (foreign
 * association, handle mismatch, a recorded handle whose comment is gone,
 * comment without row) -> `conflict`.
 */
import { failpoint } from '../../failpoints';
import type { RemoteContributionAssociateRequest } from '../../canonical/types';
import type { StepState } from '../../domain/vocab';
import { ProviderError, type ContributionInfo, type LinkHandle } from '../../providers/types';
import {
  claimContributionAssociation,
  contributionRef,
  failContributionAssociation,
  linkCommentBody,
  observedAssociation,
  providerResponseSha256,
  readContributionAssociation,
  recordContributionAssociation,
  type AssociationDoc,
  type AssociationView,
} from './ledger';
import { presentEvidenceOf, requestOf, rowSetEvidenceOf } from '../../store/effects/recording';
import { rowHash } from '../../store/effects/row-documents';
import { failTaskCreationStep } from '../../store/step-results';
import type { StepClaim, StepRow } from '../../store/types';
import type { EffectDeps, Observation, StepHandler } from '../contract';

type Req = RemoteContributionAssociateRequest;

type Attempt<T> = { ok: true; value: T } | { ok: false; error: unknown };

async function attempt<T>(fn: () => Promise<T>): Promise<Attempt<T>> {
  try {
    return { ok: true, value: await fn() };
  } catch (error) {
    return { ok: false, error };
  }
}

function failureCode(err: unknown): string {
  if (!(err instanceof ProviderError)) return 'provider_unexpected';
  return err.status !== null ? `provider_http_${err.status}` : `provider_${err.failureClass}`;
}

function messageOf(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).slice(0, 500);
}

/** Records a failed provider call; see the file contract for the mapping. */
async function recordProviderFailure(
  deps: EffectDeps,
  claim: StepClaim,
  req: Req,
  association: AssociationDoc,
  err: unknown,
): Promise<StepState> {
  const code = failureCode(err);
  const message = messageOf(err);
  if (err instanceof ProviderError && err.failureClass !== 'ambiguous') {
    deps.log.info({ step_id: claim.stepId, code, failure_class: err.failureClass }, 'provider refused; row released');
    const outcome = await failContributionAssociation(deps.db, claim, { class: err.failureClass, code, message });
    return outcome.state;
  }
  deps.log.warn({ step_id: claim.stepId, code }, 'provider call may have been applied; step is unknown, row kept');
  const evidence = rowSetEvidenceOf(claim, 'conflict', message, [observedAssociation(req, association)]);
  return failTaskCreationStep(deps.db, claim, { class: 'ambiguous', code, message, evidence });
}

async function perform(deps: EffectDeps, claim: StepClaim, heartbeat: () => Promise<void>): Promise<StepState> {
  const claimed = await claimContributionAssociation(deps.db, claim);
  if (claimed.outcome === 'recorded') return claimed.recorded.state;
  const req = requestOf(claim, 'remote_contribution_associate');
  const ref = contributionRef(req, claimed.target);
  const provider = deps.providers[req.provider];
  const marker = claimed.association.ownership_marker;

  const read = await attempt(() => provider.getContribution(ref));
  if (!read.ok) return recordProviderFailure(deps, claim, req, claimed.association, read.error);
  await heartbeat();
  const link = await attempt(() => provider.ensureLinkComment(ref, marker, linkCommentBody(req.task_id, marker)));
  if (!link.ok) return recordProviderFailure(deps, claim, req, claimed.association, link.error);

  await failpoint('after_effect_before_record', {
    kind: claim.kind,
    operationId: claim.operationId,
    stepId: claim.stepId,
  });
  const outcome = await recordContributionAssociation(deps.db, claim, {
    providerHandle: link.value.handle,
    responseSha256: link.value.responseSha256,
    info: read.value,
  });
  deps.log.info(
    { step_id: claim.stepId, provider_handle: link.value.handle, created: link.value.created, reused: claimed.reused },
    'contribution linked',
  );
  return outcome.state;
}

type RemoteSeen =
  | { ok: true; info: ContributionInfo; link: LinkHandle | null }
  | { ok: false; error: string }
  /** The provider answered that the contribution does not exist (HTTP 404/410). */
  | { ok: 'gone'; error: string };

/** HTTP answers that prove a contribution does not exist: nothing can be on it, our marker comment least of all. */
const GONE_STATUSES = new Set([404, 410]);

/** Pure: the observation from the locked row view and what the provider showed. */
function judgeContribution(step: StepRow, view: AssociationView, remote: RemoteSeen | null): Observation {
  const rows = [observedAssociation(view.request, view.row)];
  const conflict = (reason: string): Observation => ({
    effect: 'conflict',
    evidence: rowSetEvidenceOf(step, 'conflict', reason, rows),
  });
  const unobservable = (reason: string): Observation => ({
    effect: 'unobservable',
    evidence: rowSetEvidenceOf(step, 'conflict', reason, rows),
  });
  if (view.row && !view.own) return conflict(`contribution is associated with task ${view.row.task_id}`);
  if (!view.target.ok) return unobservable(`provider target unusable: ${view.target.message}`);
  if (remote !== null && remote.ok === 'gone' && (!view.row || view.row.provider_handle === null)) {
    // The provider says the contribution does not exist: no marker comment can exist on it, so the effect is
    // proven absent; the step retries and its provider read fails permanently (the creation then aborts).
    return {
      effect: 'absent_proven',
      evidence: rowSetEvidenceOf(step, 'absent_proven', `the contribution does not exist: ${remote.error}`, rows),
    };
  }
  if (remote === null || remote.ok !== true) {
    return unobservable(`provider read failed: ${remote?.error ?? 'not attempted'}`);
  }
  const { info, link } = remote;
  if (view.row && link) {
    if (view.row.provider_handle !== null && view.row.provider_handle !== link.handle) {
      return conflict(`handle mismatch: row has ${view.row.provider_handle}, marker comment is ${link.handle}`);
    }
    const evidence = presentEvidenceOf(step, {
      association_row_sha256: rowHash(view.row),
      provider_handle: link.handle,
      provider_response_sha256: providerResponseSha256(info.responseSha256, link.responseSha256),
      idempotency_key: view.row.idempotency_key,
      ownership_marker: view.row.ownership_marker,
    });
    return { effect: 'present_exact', evidence };
  }
  if (!view.row && !link) {
    return {
      effect: 'absent_proven',
      evidence: rowSetEvidenceOf(step, 'absent_proven', 'no association row and no marker comment', rows),
    };
  }
  if (view.row && view.row.provider_handle === null && !link) {
    // Our pre-claimed row (committed before any provider call, by design) and an authenticated provider
    // read showing no comment with its marker: the effect is absent and the request unchanged, so the
    // step retries; perform reuses the row and finds-or-creates the comment by the same marker.
    return {
      effect: 'absent_proven',
      evidence: rowSetEvidenceOf(
        step,
        'absent_proven',
        'our association row is claimed but the provider shows no marker comment',
        rows,
      ),
    };
  }
  return conflict(
    view.row ? 'association row without its marker comment' : 'marker comment without an association row',
  );
}

async function observe(deps: EffectDeps, step: StepRow): Promise<Observation> {
  const view = await readContributionAssociation(deps.db, step);
  if ((view.row && !view.own) || !view.target.ok) return judgeContribution(step, view, null);
  const ref = contributionRef(view.request, view.target.target);
  const provider = deps.providers[view.request.provider];
  let remote: RemoteSeen;
  try {
    const info = await provider.getContribution(ref);
    const link = await provider.findLinkComment(ref, view.marker);
    remote = { ok: true, info, link };
  } catch (err) {
    const gone = err instanceof ProviderError && err.status !== null && GONE_STATUSES.has(err.status);
    remote = { ok: gone ? 'gone' : false, error: messageOf(err) };
  }
  return judgeContribution(step, view, remote);
}

export const remoteContributionAssociateHandler: StepHandler<'remote_contribution_associate'> = {
  kind: 'remote_contribution_associate',
  perform,
  observe,
};
