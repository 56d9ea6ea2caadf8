/**
 * A claim made by the transaction that records it is folded into its record
 * (store/claimed.ts, docs/adr/0035): one UPDATE of the step row claims and
 * records it, from the state it was claimed from, with the generation and
 * attempt raised as a claim of its own raises them. A folded claim that no
 * record performed is sent on its own before COMMIT (the step stays claimed,
 * leased); the liveness check sees a folded claim as live; failures fold
 * too (`retry_wait` with its back-off, `failed`); a record past the claim's
 * lease is stale, as before, and leaves nothing. Watches the
 * statements sent (`Tx.send`). Both dialects.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Statement } from '../../src/db/batch';
import { Tx } from '../../src/db/tx';
import type { StepHandler } from '../../src/kinds/contract';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { assertClaimLiveLocked, failWithRowsLocked } from '../../src/store/effects/recording';
import { claimAndApplyLedgerStep } from '../../src/store/ledger-step';
import type { LedgerApply } from '../../src/store/ledger-apply';
import { sql, useTestDb } from '../support/db';
import { stepRows } from '../support/ledger';
import { createGroupTask, groupTaskBatchWithPhaseA, loadStep } from './support';

const t = useTestDb();

afterEach(() => {
  vi.restoreAllMocks();
});

/** Every statement the transactions sent or left for COMMIT (`Tx.send`, `Tx.expect`), each once. */
function watchSends(): { all(): Statement[] } {
  const sent = new Set<Statement>();
  const proto = Tx.prototype as unknown as {
    send(this: Tx, s: readonly Statement[]): Promise<unknown>;
    expect(this: Tx, s: Statement, affected: number, mismatch: () => Error): void;
  };
  const send = proto.send;
  const expectOne = proto.expect;
  vi.spyOn(proto, 'send').mockImplementation(function (this: Tx, statements: readonly Statement[]) {
    for (const s of statements) sent.add(s);
    return send.call(this, statements);
  });
  vi.spyOn(proto, 'expect').mockImplementation(function (this: Tx, s: Statement, n: number, m: () => Error) {
    sent.add(s);
    return expectOne.call(this, s, n, m);
  });
  return { all: () => [...sent] };
}

/** The UPDATEs of one step row among them. */
const stepUpdates = (sent: { all(): Statement[] }, stepId: string) =>
  sent.all().filter((s) => /^\s*UPDATE task_creation_steps\b/i.test(s.sql) && s.params.includes(stepId));

/** A group task's workspace attachment, claimed and applied by `apply` in one transaction with a `leaseMs` lease. */
async function attachmentInClaim(apply: LedgerApply, leaseMs = 30_000) {
  const { c } = await createGroupTask(t.db);
  const row = (await stepRows(t.db, c.operationId)).find((r) => r.kind === 'workspace_attachment')!;
  const ref = { kind: 'workspace_attachment' as const, stepKey: row.step_key };
  return { row, result: claimAndApplyLedgerStep(t.db, c.auth, ref, 'w1', leaseMs, apply) };
}

/** The workspace attachment's own effect, as a fleet worker applies it. */
const attach = (defaultStepHandlers.workspace_attachment as StepHandler).applyInClaim!;

describe('a claim folded into its record', () => {
  it('a ledger batch claims and records each step by one UPDATE, raising generation and attempt', async () => {
    const sent = watchSends();
    const { c, batch } = await groupTaskBatchWithPhaseA(t.db);
    expect(batch.phaseA).toBe('completing');
    const rows = await stepRows(t.db, c.operationId);
    const ledger = rows.filter((r) => batch.results.some((b) => b.claim.stepId === r.id));
    expect(ledger.map((r) => r.kind).sort()).toEqual(['launch_intent', 'session_prepare', 'workspace_attachment']);
    for (const r of ledger) {
      expect(stepUpdates(sent, r.id)).toHaveLength(1);
      const step = await loadStep(t.db, r.id);
      expect(step).toMatchObject({ generation: 1, attempt: 1, lease_owner: null, lease_expires_at: null });
      expect(step.state).toBe(r.kind === 'launch_intent' ? 'armed' : 'succeeded');
    }
  });

  it('a folded claim no record performed is sent on its own: the step stays claimed and leased', async () => {
    const { result } = await attachmentInClaim(async (tx, cl) => {
      // Live while folded: the row is still as claimed from, and locked by this transaction.
      await assertClaimLiveLocked(tx, cl);
      return { state: 'running', evidence: null as never, code: null };
    });
    const { claim, outcome } = await result;
    expect(outcome.state).toBe('running');
    const step = await loadStep(t.db, claim.stepId);
    expect(step).toMatchObject({ state: 'running', generation: 1, attempt: 1, lease_owner: 'w1' });
    expect(step.lease_expires_at).not.toBeNull();
  });

  it('once its folded record is issued, the claim is no longer live', async () => {
    const { row, result } = await attachmentInClaim(async (tx, cl, ctx) => {
      await assertClaimLiveLocked(tx, cl);
      const recorded = await attach(tx, cl, ctx);
      // The row has left the claimed-from state, and it is not running under this claim either.
      await expect(assertClaimLiveLocked(tx, cl)).rejects.toMatchObject({ code: 'stale_claim' });
      return recorded;
    });
    expect((await result).outcome.state).toBe('succeeded');
    expect(await loadStep(t.db, row.id)).toMatchObject({ state: 'succeeded', generation: 1, attempt: 1 });
  });

  it.each([
    ['transient', 'retry_wait'],
    ['permanent', 'failed'],
    ['ambiguous', 'unknown'],
  ] as const)('a %s failure folds too: the row goes straight to %s', async (cls, state) => {
    const { row, result } = await attachmentInClaim((tx, cl, ctx) =>
      failWithRowsLocked(tx, ctx!, cl, cls, 'test_failure', 'a failure made by the test', []),
    );
    const { outcome } = await result;
    expect(outcome.state).toBe(state);
    const step = await loadStep(t.db, row.id);
    expect(step).toMatchObject({ state, generation: 1, attempt: 1, lease_owner: null, lease_expires_at: null });
    const [errors] = await sql<{ error_code: string | null; next_attempt_at: unknown }>(
      t.db,
      'SELECT error_code, next_attempt_at FROM task_creation_steps WHERE id = ?',
      [row.id],
    );
    expect(errors!.error_code).toBe('test_failure');
    // Only a transient failure waits for a next attempt.
    expect(errors!.next_attempt_at === null).toBe(state !== 'retry_wait');
  });

  it("a record after the claim's lease ran out is stale and leaves nothing", async () => {
    const { row, result } = await attachmentInClaim(async (tx, cl, ctx) => {
      await new Promise((r) => setTimeout(r, 50));
      return attach(tx, cl, ctx);
    }, 5);
    await expect(result).rejects.toMatchObject({ code: 'stale_claim' });
    expect(await loadStep(t.db, row.id)).toMatchObject({ state: 'planned', generation: 0, attempt: 0 });
  });
});
