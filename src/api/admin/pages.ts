/**
 * The operator pages as HTML strings (pure functions of read models; every
 * value is escaped in html.ts). Each page's live region is also served alone
 * (`?fragment=1`) for live.js.
 *
 * - `loginPage`: the token form (POST /admin/login), nothing else.
 * - `operationsTable`: the list, newest first, with filters and a next-page link.
 * - `operationDetail`: plan, step timeline with hash verifications, the one
 *   legal RecoveryAction as the only button (the resolve form beside it when
 *   the action is `reconcile_unknown_step`), cleanup jobs, dispatch claims,
 *   events, Bull Board links.
 * - `deletionsTable`: workspace deletions and their counts.
 */
import { completeJobId, COMPLETE_QUEUE, stepJobId, stepQueueName } from '../../../queues/names';
import type { RecoveryDecision } from '../../runtime/recovery-action';
import type { StuckOperation } from '../../runtime/stuck';
import { docBlock, esc, hashCell, show } from './html';
import type { OperationExtras } from './ledger-read';

type Row = Record<string, unknown>;

/** Actions the button runs under an operation claim; dispatch actions are decided by the reaper's observation. */
export const BUTTON_ACTIONS = new Set([
  'reconcile_unknown_step',
  'retry_compensation',
  'complete_preparing',
  'abort_preparing',
  'resume_preparing',
  'retry_preparing_release',
  'complete_completing',
]);

export interface Notice {
  kind: 'conflict' | 'done';
  text: string;
}

export function loginPage(error: string | null): string {
  return `<h1>Operator login</h1>
${error ? `<div class="notice conflict" role="alert">${esc(error)}</div>` : ''}
<form method="post" action="/admin/login" class="filters">
<label>Operator token<input type="password" name="token" autocomplete="current-password" required size="48"></label>
<button type="submit">Log in</button></form>
<p class="muted">The token is sent once in this form's body; the browser keeps only an HTTP-only session cookie.</p>`;
}

export const boardJobUrl = (queue: string, jobId: string): string =>
  `/admin/queues/queue/${encodeURIComponent(queue)}/${encodeURIComponent(jobId)}`;

export interface ListView {
  rows: Row[];
  stuck: Map<string, StuckOperation> | null;
  nextCursor: string | null;
  filter: { workspace_id?: string; state?: string; stuck_minutes?: number; limit?: number };
  states: readonly string[];
}

function query(filter: ListView['filter'], extra: Record<string, string> = {}): string {
  const q = new URLSearchParams();
  if (filter.workspace_id) q.set('workspace_id', filter.workspace_id);
  if (filter.state) q.set('state', filter.state);
  if (filter.stuck_minutes !== undefined) q.set('stuck_minutes', String(filter.stuck_minutes));
  if (filter.limit !== undefined) q.set('limit', String(filter.limit));
  for (const [k, v] of Object.entries(extra)) q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : '';
}

export function listFilters(view: ListView): string {
  const f = view.filter;
  const options = ['', ...view.states]
    .map((s) => `<option value="${esc(s)}"${s === (f.state ?? '') ? ' selected' : ''}>${s ? esc(s) : 'any'}</option>`)
    .join('');
  return `<h1>Creation operations</h1>
<form method="get" action="/admin/ledger" class="filters">
<label>Workspace<input name="workspace_id" value="${esc(f.workspace_id)}" size="38" placeholder="any"></label>
<label>State<select name="state">${options}</select></label>
<label>Stuck (no progress for N minutes)<input name="stuck_minutes" type="number" min="0" value="${esc(f.stuck_minutes)}" placeholder="off"></label>
<button type="submit">Filter</button></form>`;
}

export function operationsTable(view: ListView): string {
  const rows = view.rows
    .map((r) => {
      const id = String(r.id);
      const stuck = view.stuck?.get(id);
      return `<tr data-operation-id="${esc(id)}"><td><a href="/admin/ledger/operations/${esc(id)}">${esc(id)}</a></td>
<td>${show(r.workspace_id)}</td><td>${show(r.task_id)}</td><td class="state">${show(r.state)}</td>
<td>${show(r.result_outcome ?? r.abort_cause)}</td><td>${show(r.created_at)}</td><td>${show(r.updated_at)}</td>
${stuck ? `<td>${show(stuck.action)}<br><span class="muted">${esc(stuck.waiting_for)}</span></td>` : view.stuck ? '<td>—</td>' : ''}</tr>`;
    })
    .join('\n');
  const more = view.nextCursor
    ? `<a id="next-page" href="/admin/ledger${esc(query(view.filter, { cursor: view.nextCursor }))}">Next page →</a>`
    : '<span class="muted">end of list</span>';
  return `<table id="operations"><thead><tr><th>Operation</th><th>Workspace</th><th>Task</th><th>State</th><th>Outcome / cause</th>
<th>Created</th><th>Updated</th>${view.stuck ? '<th>Waits for</th>' : ''}</tr></thead>
<tbody>${rows || `<tr><td colspan="8" class="muted">no operations</td></tr>`}</tbody></table>${more}`;
}

export const listFragmentSrc = (filter: ListView['filter'], cursor?: string): string =>
  `/admin/ledger${query(filter, { ...(cursor ? { cursor } : {}), fragment: '1' })}`;

function actionSection(op: Row, decision: RecoveryDecision | null): string {
  const id = esc(op.id);
  if (decision === null) return '';
  if (decision.action === null) {
    return `<div class="action" id="legal-action"><strong>Recovery:</strong> no action is legal now — <code>${esc(decision.reason)}</code>: ${esc(decision.detail)}</div>`;
  }
  const action = decision.action;
  if (!BUTTON_ACTIONS.has(action)) {
    const why =
      action === 'replay_terminal'
        ? 'read-only: the operation is terminal, nothing to run'
        : 'decided by the reaper’s dispatch pass from an observation of the runtime';
    return `<div class="action" id="legal-action"><strong>Legal recovery action:</strong> <code data-action="${esc(action)}">${esc(action)}</code> <span class="muted">(${esc(why)})</span></div>`;
  }
  const steps = (op.steps as Row[]).filter((s) => s.state === 'unknown');
  const resolve =
    action === 'reconcile_unknown_step'
      ? steps
          .map(
            (s) => `<form method="post" action="/admin/ledger/operations/${id}/resolve" class="filters resolve">
<input type="hidden" name="kind" value="${esc(s.kind)}"><input type="hidden" name="step_key" value="${esc(s.step_key)}">
<span>Resolve <code>${esc(s.kind)}/${esc(s.step_key)}</code> as</span>
<select name="resolution"><option value="succeeded">succeeded (effect present)</option><option value="retry_wait">retry_wait (effect absent)</option><option value="failed">failed (effect absent)</option></select>
<button type="submit">Resolve (checked against a fresh observation)</button></form>`,
          )
          .join('')
      : '';
  return `<div class="action" id="legal-action"><strong>Legal recovery action:</strong> <code data-action="${esc(action)}">${esc(action)}</code>
<form method="post" action="/admin/ledger/operations/${id}/recover" style="display:inline">
<input type="hidden" name="expected_action" value="${esc(action)}">
<button type="submit" id="recover-button">Run ${esc(action)}</button></form>
<span class="muted">runs through the same Store claim as the reaper; refused if the operation changed since this page was read</span>${resolve}</div>`;
}

function stepRow(s: Row, extras: OperationExtras): string {
  const v = extras.steps.get(String(s.id)) ?? { request: 'absent', evidence: 'absent', compensation: 'absent' };
  const job = boardJobUrl(stepQueueName(s.kind as never), stepJobId(String(s.id), Number(s.generation)));
  return `<tr data-step="${esc(s.kind)}/${esc(s.step_key)}"><td><code>${esc(s.kind)}</code><br>${esc(s.step_key)}</td>
<td class="state">${show(s.state)}</td><td>${show(s.generation)}</td><td>${show(s.attempt)}</td>
<td>${show(s.lease_owner)}<br><span class="muted">${show(s.lease_expires_at)}</span></td>
<td>${docBlock('request', s.request)}${hashCell(s.request_sha256, v.request)}</td>
<td class="evidence">${docBlock('evidence', s.evidence)}${hashCell(s.evidence_sha256, v.evidence)}</td>
<td>${show(s.compensation_state)}${s.compensation_evidence ? ` ${docBlock('compensation proof', s.compensation_evidence)}${hashCell('', v.compensation)}` : ''}</td>
<td>${s.error ? docBlock('error', s.error) : '—'}</td>
<td><a href="${esc(job)}">job</a>${s.cleanup_job_id ? `<br>cleanup ${esc(s.cleanup_job_id)}` : ''}</td></tr>`;
}

export function operationDetail(op: Row, extras: OperationExtras, decision: RecoveryDecision | null): string {
  const steps = (op.steps as Row[]).map((s) => stepRow(s, extras)).join('\n');
  const recovery = op.recovery as Row;
  const cleanup = extras.cleanupJobs
    .map(
      (
        c,
      ) => `<tr><td>${esc(c.id)}</td><td>${show(c.kind)}</td><td>${show(c.reason)}</td><td class="state">${show(c.state)}</td>
<td>${show(c.generation)} / ${show(c.attempt)}</td><td>${docBlock('proof', c.proof)}${hashCell(c.proof_sha256, c.proofVerification)}</td>
<td>${show(c.error_code)}</td><td>${show(c.finished_at)}</td></tr>`,
    )
    .join('');
  const claims = extras.dispatchClaims
    .map(
      (
        c,
      ) => `<tr><td>${esc(c.id)}</td><td class="state">${show(c.state)}</td><td>${show(c.generation)} / ${show(c.attempt)}</td>
<td>${show(c.lease_owner)}<br><span class="muted">${show(c.lease_expires_at)}</span></td><td>${show(c.runtime_handle)}</td>
<td>${docBlock('evidence', c.evidence)}${hashCell(c.evidence_sha256, c.evidenceVerification)}</td><td>${show(c.deletion_operation_id)}</td>
<td><a href="${esc(boardJobUrl('launch', `launch-${String(op.id)}-${String(c.session_id)}`))}">job</a></td></tr>`,
    )
    .join('');
  const events = extras.events
    .map(
      (e) => `<tr><td>${show(e.seq)}</td><td>${show(e.type)}</td><td>${show(e.revision)}</td><td>${esc(e.event_id)}</td>
<td>${hashCell(e.payload_sha256, e.payloadVerification)}</td><td>${show(e.created_at)}</td><td>${show(e.delivered_at)} (${show(e.delivery_attempts)} attempts)</td></tr>`,
    )
    .join('');
  return `<h1>Operation <code>${esc(op.id)}</code></h1>
<table id="operation"><tr><th>State</th><td class="state" id="operation-state">${show(op.state)}</td><th>Workspace</th><td>${show(op.workspace_id)}</td><th>Task</th><td>${show(op.task_id)}</td></tr>
<tr><th>Generation</th><td>${show(op.generation)}</td><th>Lease</th><td>${show(op.lease_owner)} ${show(op.lease_expires_at)}</td><th>Start policy</th><td>${show(op.start_policy)}</td></tr>
<tr><th>Last recovery</th><td>${show(recovery.action)} (gen ${show(recovery.generation)})</td><th>Recovery owner</th><td>${show(recovery.owner)} ${show(recovery.lease_expires_at)}</td><th>Outcome / cause</th><td>${show((op.result as Row).outcome ?? op.abort_cause)}</td></tr>
<tr><th>Created</th><td>${show(op.created_at)}</td><th>Updated</th><td>${show(op.updated_at)}</td><th>Completed / aborted</th><td>${show(op.completed_at ?? op.aborted_at)}</td></tr>
<tr><th>Manifest hash</th><td colspan="2">${hashCell(op.manifest_hash, extras.manifest)}</td><th>Actor binding hash</th><td colspan="2">${hashCell(op.actor_binding_hash, extras.actor)}</td></tr></table>
${actionSection(op, decision)}
<h2>Plan</h2>${docBlock('plan', op.plan)} ${docBlock('actor', op.actor)} ${op.error ? docBlock('error', op.error, true) : ''}
<p>Jobs in Bull Board: <a href="${esc(boardJobUrl(COMPLETE_QUEUE, completeJobId(String(op.id))))}">complete</a> · step jobs in each row below</p>
<h2>Steps</h2>
<table id="steps"><thead><tr><th>Step</th><th>State</th><th>Gen</th><th>Attempt</th><th>Lease owner / expiry</th><th>Request</th><th>Evidence</th><th>Compensation</th><th>Error / note</th><th>Jobs</th></tr></thead>
<tbody>${steps}</tbody></table>
<h2>Compensation and cleanup jobs</h2>
${cleanup ? `<table id="cleanup"><thead><tr><th>Job</th><th>Kind</th><th>Reason</th><th>State</th><th>Gen / attempt</th><th>Proof</th><th>Error</th><th>Finished</th></tr></thead><tbody>${cleanup}</tbody></table>` : '<p class="muted">none</p>'}
<h2>Launch dispatch claims</h2>
${claims ? `<table id="dispatch"><thead><tr><th>Claim</th><th>State</th><th>Gen / attempt</th><th>Lease</th><th>Runtime</th><th>Evidence</th><th>Deletion fence</th><th>Job</th></tr></thead><tbody>${claims}</tbody></table>` : '<p class="muted">none</p>'}
<h2>Events</h2>
${events ? `<table id="events"><thead><tr><th>Seq</th><th>Type</th><th>Revision</th><th>Event</th><th>Payload hash</th><th>Created</th><th>Delivered</th></tr></thead><tbody>${events}</tbody></table>` : '<p class="muted">none</p>'}`;
}

export function deletionsTable(rows: Row[]): string {
  const body = rows
    .map(
      (
        d,
      ) => `<tr data-deletion-id="${esc(d.id)}"><td>${esc(d.id)}</td><td><a href="/admin/ledger?workspace_id=${esc(d.workspace_id)}">${esc(d.workspace_id)}</a></td>
<td class="state">${show(d.state)}</td><td>${show(d.requested_by)}</td><td>${show(d.completed_creations)}</td><td>${show(d.aborted_creations)}</td>
<td>${show(d.deleted_tasks)}</td><td>${show(d.cancelled_launches)}</td><td>${show(d.transferred_launches)}</td><td>${show(d.cleanup_jobs)}</td>
<td>${show(d.waiting_operations)}</td><td>${show(d.batches)}</td><td>${show(d.requested_at)}</td><td>${show(d.completed_at)}</td></tr>`,
    )
    .join('');
  return `<table id="deletions"><thead><tr><th>Deletion</th><th>Workspace</th><th>State</th><th>Requested by</th><th>Completed creations</th><th>Aborted creations</th>
<th>Deleted tasks</th><th>Cancelled launches</th><th>Transferred launches</th><th>Cleanup jobs</th><th>Waiting operations</th><th>Batches</th><th>Requested</th><th>Completed</th></tr></thead>
<tbody>${body || '<tr><td colspan="14" class="muted">no workspace deletions</td></tr>'}</tbody></table>`;
}
