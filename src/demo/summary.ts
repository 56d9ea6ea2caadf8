/**
 * The demo's closing report: the answers by outcome, what the ledger holds
 * (operations, delivered `task.created` events, launches, worktrees), what
 * each fault scenario did, where to look next, and the verdict. The verdict
 * fails when an ordinary creation did not complete, or when an invariant the
 * demo shows is broken (a duplicate event, a retried webhook making a second
 * task, a refused request leaving a row behind, an event or launch missing).
 */
import type { BatchResults, DoneResult, RequestResult, ResponseKind } from './batch';
import type { LedgerSnapshot, OperationRow, StepRow } from './ledger';
import { PR_MISSING, PR_TRANSIENT, TRANSIENT_FAULTS } from './scenarios';
import { AGENT_MARKER_FILE } from './setup';

export interface SummaryInput {
  results: BatchResults;
  snapshot: LedgerSnapshot;
  /** remote_contribution_associate steps of the fault PRs, by operation. */
  faultSteps: StepRow[];
  workspace: { id: string; name: string };
  dialect: string;
  apiBase: string;
  memberToken: string;
  operatorToken: string | null;
  timedOut: boolean;
  waitedMs: number;
  keepRunning: boolean;
}

export interface Summary {
  lines: string[];
  failures: string[];
}

const KINDS: [ResponseKind, string][] = [
  ['Created', 'Created'],
  ['FoundSettled', 'FoundSettled'],
  ['FoundUnsettled', 'FoundUnsettled'],
  ['CreatedIdentityLost', 'CreatedIdentityLost'],
  ['pending', 'pending (202)'],
  ['aborted', 'aborted (422)'],
  ['rejected', 'rejected (4xx)'],
  ['error', 'errors'],
];

const row = (label: string, value: string | number, width = 28) => `    ${label.padEnd(width)} ${String(value)}`;

function answer(r: RequestResult): string {
  if (r.kind === 'rejected' || r.kind === 'aborted') return `${r.status ?? '-'} ${r.error ?? r.kind}`;
  if (r.kind === 'error') return `error: ${r.error ?? `HTTP ${r.status ?? '-'}`}`;
  if (r.kind === 'pending') return '202 pending';
  return r.kind;
}

function finalState(op: OperationRow | undefined): string {
  if (!op) return 'no operation';
  if (op.state === 'aborted') return `aborted (${op.abort_cause ?? 'no cause recorded'})`;
  if (op.state === 'completed')
    return op.result_outcome === 'CreatedIdentityLost' ? 'completed (identity lost)' : 'completed';
  return op.failed_step ? `${op.state}, step ${op.failed_step}` : op.state;
}

function describeFault(r: RequestResult, op: OperationRow | undefined, steps: StepRow[]): string {
  const head = `${answer(r)} -> ${finalState(op)}`;
  const body = r.request.body as { contributions?: { contribution_id?: string }[] };
  const pr = Number(body.contributions?.[0]?.contribution_id);
  const step = steps.find((s) => s.operation_id === r.operationId);
  if (pr === PR_TRANSIENT && step) {
    return `${head}; the provider read failed ${TRANSIENT_FAULTS}x (transient: retry_wait with backoff), step ${step.state} after ${step.attempt} attempts`;
  }
  if (pr === PR_MISSING && op?.state === 'aborted') {
    return `${head}. A 404 is permanent: nothing was posted; the other steps' effects were compensated and the creation aborted (no task.created)`;
  }
  if (pr === PR_MISSING && op && op.state !== 'completed') {
    return `${head}. A 404 is permanent: nothing was posted; the reaper compensates the other steps and aborts the creation (taskledger ops show ${op.id})`;
  }
  return head;
}

function deferredLine(deferred: number, done: DoneResult | null, s: LedgerSnapshot): string {
  const head = `${deferred} (blocked_by: no agent until the blocker is done)`;
  if (!done) return head;
  const answer = done.status === 200 ? `200, unblocked ${done.resolved.length}` : `${done.status ?? '-'} ${done.error}`;
  return (
    `${head}; POST /tasks/<blocker>/done: ${answer}; task.dependencies_resolved ${s.resolved.delivered} delivered / ` +
    `${s.resolved.total} written (${s.resolved.deferred} for deferred starts, each to launch one agent)`
  );
}

export function summarize(input: SummaryInput): Summary {
  const { results, snapshot: s } = input;
  const all = [...results.tasks, ...results.webhook, ...results.faults];
  const ops = new Map(s.operations.map((o) => [o.id, o]));
  const opOf = (r: RequestResult) => (r.operationId ? ops.get(r.operationId) : undefined);
  const failures: string[] = [];
  const lines: string[] = ['', 'summary'];

  lines.push(`  answers to ${all.length} create requests (POST /api/v1/tasks, member token)`);
  for (const [kind, label] of KINDS) lines.push(row(label, all.filter((r) => r.kind === kind).length));

  const byState = (state: string) => s.operations.filter((o) => o.state === state).length;
  const open = s.operations.filter((o) => o.state !== 'completed' && o.state !== 'aborted');
  const stuck = open.filter((o) => o.failed_step !== null).length;
  lines.push(`  creations in the ledger (workspace ${input.workspace.name}, ${input.dialect})`);
  lines.push(row('completed', byState('completed')));
  lines.push(row('aborted', byState('aborted')));
  lines.push(row('still preparing', `${open.length}${stuck > 0 ? ` (${stuck} stopped on a failed step)` : ''}`));

  const ev = s.events;
  lines.push(
    `  events delivered   task.created ${ev.delivered} delivered / ${ev.total} written, for ${byState('completed')} completed creations; ${ev.duplicateTasks} tasks with more than one`,
  );
  const claimsOk = s.claims.succeeded ?? 0;
  const execs = Object.entries(s.executors)
    .map(([k, v]) => `${v} ${k}`)
    .join(', ');
  lines.push(
    `  launches           dispatch claims succeeded ${claimsOk} / ${s.launchesExpected} expected starts (immediate, and deferred once unblocked); executors_running ${execs || '0'}; ${s.agentMarkers} agents wrote ${AGENT_MARKER_FILE}`,
  );
  const deferred = s.operations.filter((o) => o.start_policy === 'deferred' && o.state === 'completed').length;
  lines.push(`  deferred starts    ${deferredLine(deferred, results.done, s)}`);
  if (results.done && results.done.status !== 200) {
    failures.push(`marking the blocker done answered ${results.done.status ?? 'nothing'}: ${results.done.error ?? ''}`);
  } else if (results.done && s.resolved.deferred < deferred) {
    failures.push(`${deferred - s.resolved.deferred} deferred starts were not unblocked by their blocker's done`);
  }
  lines.push(
    `  worktrees          ${s.worktrees.onDisk} on disk / ${s.worktrees.total} recorded, under ${s.worktrees.dir}`,
  );
  if (input.timedOut)
    lines.push(`  (stopped waiting after ${Math.round(input.waitedMs / 1000)} s; the fleet may still be working)`);

  // Faults, one line each.
  lines.push('', 'faults');
  const hook = results.webhook;
  const hookTasks = new Set(hook.map((r) => r.taskId).filter((t): t is string => t !== null));
  lines.push(
    `  webhook, ${hook.length} deliveries of one external_id: ${hookTasks.size} task; answers ${hook.map(answer).join(', ')}`,
  );
  if (hookTasks.size !== 1) failures.push(`the retried webhook made ${hookTasks.size} tasks, not 1`);
  hook.slice(1).forEach((r, i) => {
    if (r.kind !== 'FoundSettled' && r.kind !== 'FoundUnsettled')
      failures.push(`webhook retry ${i + 1} answered ${answer(r)}, not a found outcome`);
  });
  for (const r of results.faults) {
    lines.push(`  ${r.request.label}: ${describeFault(r, opOf(r), input.faultSteps)}`);
    if (r.request.expect === 'reject' && !(r.kind === 'rejected' && r.status === 400))
      failures.push(`"${r.request.label}" answered ${answer(r)}, not 400`);
  }
  const answered = new Set(all.map((r) => r.operationId).filter((id): id is string => id !== null));
  const unexplained = s.operations.filter((o) => !answered.has(o.id)).length;
  lines.push(
    unexplained === 0
      ? '  refused requests wrote nothing: every operation in the ledger answers an accepted request'
      : `  ${unexplained} operations in the ledger answer no accepted request`,
  );
  if (unexplained > 0) failures.push(`${unexplained} operations were written for requests that got no operation ID`);

  // Ordinary creations must complete.
  const ordinary = [...results.tasks, ...(hook[0] ? [hook[0]] : [])];
  for (const r of ordinary) {
    const op = opOf(r);
    if (op?.state !== 'completed')
      failures.push(`"${r.request.body.title as string}": ${answer(r)} -> ${finalState(op)}`);
  }
  if (ev.duplicateTasks > 0) failures.push(`${ev.duplicateTasks} tasks have more than one task.created`);
  if (ev.delivered < ev.total) failures.push(`${ev.total - ev.delivered} task.created events not delivered`);
  if (claimsOk < s.launchesExpected) failures.push(`${s.launchesExpected - claimsOk} immediate starts did not launch`);

  const api = input.apiBase;
  const origin = api.replace(/\/api\/v1$/, '');
  const opToken = input.operatorToken ?? '$TASKLEDGER_ADMIN_TOKEN';
  lines.push('', 'where to look next');
  lines.push(`  API          ${api}   member token: ${input.memberToken}`);
  lines.push(
    input.operatorToken
      ? `  operator     token ${input.operatorToken}   (generated, stored hashed; set TASKLEDGER_ADMIN_TOKEN to use your own)`
      : '  operator     the TASKLEDGER_ADMIN_TOKEN of this environment',
  );
  lines.push(`  ledger view  ${origin}/admin/ledger   (log in with the operator token; Bull Board at /admin/queues)`);
  lines.push(`  metrics      ${origin}/metrics`);
  lines.push(
    `  operations   curl -H "Authorization: Bearer ${opToken}" "${api}/creation-operations?workspace_id=${input.workspace.id}"`,
  );
  lines.push(`  worktrees    ${s.worktrees.dir}`);
  lines.push(
    input.keepRunning
      ? '  the fleet    is still running in this process: Ctrl-C stops it; later, `taskledger start` runs it'
      : '  the fleet    `taskledger start` runs every role until Ctrl-C (`taskledger demo --keep-running` keeps this one up)',
  );
  const total = ordinary.length;
  const completed = ordinary.filter((r) => opOf(r)?.state === 'completed').length;
  lines.push(
    '',
    failures.length === 0
      ? `result: OK, every ordinary creation completed (${completed}/${total})`
      : `result: FAILED (${completed}/${total} ordinary creations completed)`,
  );
  for (const f of failures) lines.push(`  - ${f}`);
  return { lines, failures };
}
