/**
 * A row the ledger batch locks is not read again by a statement of its own
 * (ADR 0032): every effect-row lock that names the columns its kind reads
 * next (`LockNeed.reads`) answers that read, so no plain read of the same
 * row (same table, same WHERE, same parameters) reaches the server before
 * the transaction writes that table. A kind whose `reads` drifted from what
 * its reader selects would send the read again, and fail here; so would the
 * guard's task and identity locks, which answer the check of the rows Begin
 * inserted (ADR 0034). Watches the
 * statements each transaction sends (`Tx.send`) through a whole batch that
 * attaches the task to its group, prepares its session, arms its launch and
 * runs Complete's phase A. A transaction that does not check Begin's rows
 * locks the task without its text (`title`, `description`, up to 64 KiB).
 * Both dialects.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Statement } from '../../src/db/batch';
import { Tx } from '../../src/db/tx';
import { IDENTITY_ROW_READ, TASK_ROW_READ } from '../../src/store/task-row-reads';
import { sql, useTestDb } from '../support/db';
import { claimAndApplyLedgerSteps } from '../../src/store/ledger-step';
import { stepRows } from '../support/ledger';
import { createGroupTask, groupTaskBatchWithPhaseA, LEDGER_KINDS } from './support';

const t = useTestDb();

afterEach(() => {
  vi.restoreAllMocks();
});

const LOCK_CLAUSE = /\s+(?:FOR\s+(?:UPDATE|SHARE)|LOCK\s+IN\s+SHARE\s+MODE)\s*$/i;
const WRITE = /^\s*(?:WITH\s+checked\s+AS\s+\(\s*)?(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(\w+)/i;
/** `FROM <table> ... WHERE ...` of a single-table SELECT (the row it reads), or null for anything else. */
const ROW_READ = /^\s*SELECT\s+[\s\S]+?\s+FROM\s+(\w+)\b([\s\S]*)$/i;

/** Every statement each transaction sent, in order, by transaction. */
function watchSends(): Map<Tx, Statement[]> {
  const sent = new Map<Tx, Statement[]>();
  const proto = Tx.prototype as unknown as { send(this: Tx, s: readonly Statement[]): Promise<unknown> };
  const original = proto.send;
  vi.spyOn(proto, 'send').mockImplementation(function (this: Tx, statements: readonly Statement[]) {
    sent.set(this, [...(sent.get(this) ?? []), ...statements]);
    return original.call(this, statements);
  });
  return sent;
}

/** Plain reads of a row the same transaction locked before, with no write to its table in between. */
function readsAgain(statements: readonly Statement[]): string[] {
  const locked = new Map<string, string>();
  const found: string[] = [];
  for (const { sql, params } of statements) {
    const write = WRITE.exec(sql);
    if (write) {
      const table = (write[1] as string).toLowerCase();
      for (const [key, t2] of locked) if (t2 === table) locked.delete(key);
      continue;
    }
    const row = ROW_READ.exec(sql);
    if (!row || /\bJOIN\b/i.test(sql)) continue;
    const table = (row[1] as string).toLowerCase();
    const rest = (row[2] as string).replace(LOCK_CLAUSE, '').replace(/\s+FORCE\s+INDEX\s*\([^)]*\)/i, '');
    const key = `${table}|${rest.trim()}|${JSON.stringify(params)}`;
    if (LOCK_CLAUSE.test(sql)) locked.set(key, table);
    else if (locked.has(key)) found.push(sql.slice(0, 120));
  }
  return found;
}

describe('locked rows are read once', () => {
  it('a ledger batch with phase A reads no effect row it locked again before writing its table', async () => {
    const sent = watchSends();
    const { batch } = await groupTaskBatchWithPhaseA(t.db);
    expect(batch.phaseA).toBe('completing');
    const all = [...sent.values()];
    expect(all.length).toBeGreaterThan(0);
    // The watch sees the locks that read (the session row's, among others).
    expect(all.flat().some((s) => /FROM task_sessions WHERE/.test(s.sql) && LOCK_CLAUSE.test(s.sql))).toBe(true);
    // None, the task and identity rows included: the guard's locks of them read the columns phase A's check of the
    // rows Begin inserted reads next (ADR 0034).
    expect(all.flatMap(readsAgain)).toEqual([]);
    // And that check is not sent at all: the guard's lock answered it.
    expect(all.flat().filter((s) => s.sql === TASK_ROW_READ || s.sql === IDENTITY_ROW_READ)).toEqual([]);
  });

  it("a guarded transaction that does not check Begin's rows reads no task text; one that does, once", async () => {
    const readsText = (s: Statement) => /^\s*SELECT\b[\s\S]*\bdescription\b[\s\S]*\bFROM\s+tasks\b/i.test(s.sql);
    const sent = watchSends();
    const { c } = await createGroupTask(t.db);
    sent.clear();
    const row = (await stepRows(t.db, c.operationId)).find((r) => r.kind === 'session_prepare')!;
    const auth = { kind: 'operation', operationId: c.operationId, actor: 'w1' } as const;
    const ref = { kind: 'session_prepare' as const, stepKey: row.step_key };
    // The batch without phase A (a worker that leaves Complete to its own transactions) arms the launch all the same.
    const batch = await claimAndApplyLedgerSteps(t.db, auth, ref, 'w1', 30_000, LEDGER_KINDS);
    expect(batch.phaseA).toBe('not_asked');
    const statements = [...sent.values()].flat();
    expect(statements.some((s) => /FROM tasks WHERE id = \? FOR UPDATE/.test(s.sql))).toBe(true);
    expect(statements.filter(readsText)).toEqual([]);

    sent.clear();
    const withPhaseA = await groupTaskBatchWithPhaseA(t.db);
    expect(withPhaseA.batch.phaseA).toBe('completing');
    const texts = [...sent.values()].flat().filter(readsText);
    expect(texts.map((s) => LOCK_CLAUSE.test(s.sql))).toEqual([true]);
  });

  it("an attachment without an environment reads no task's binding; one with an environment locks it", async () => {
    const readsBinding = (s: Statement) => /\bFROM\s+task_environment_bindings\b/i.test(s.sql);
    const sent = watchSends();
    const { batch } = await groupTaskBatchWithPhaseA(t.db);
    expect(batch.phaseA).toBe('completing');
    // The attachment expects no binding and checks none: nothing is read for it, in the batch or in phase A.
    expect([...sent.values()].flat().filter(readsBinding)).toEqual([]);

    sent.clear();
    const { ws, c } = await createGroupTask(t.db, (w) => ({
      workspace_policy: { mode: 'shared_group', group_id: w.groupId, environment_id: w.sharedEnvironmentId },
    }));
    const row = (await stepRows(t.db, c.operationId)).find((r) => r.kind === 'session_prepare')!;
    const auth = { kind: 'operation', operationId: c.operationId, actor: 'w1' } as const;
    const ref = { kind: 'session_prepare' as const, stepKey: row.step_key };
    const withEnvironment = await claimAndApplyLedgerSteps(t.db, auth, ref, 'w1', 30_000, LEDGER_KINDS);
    expect(withEnvironment.results.map((r) => r.outcome.state)).toEqual(expect.arrayContaining(['succeeded', 'armed']));
    expect(withEnvironment.results.map((r) => r.outcome.state)).not.toContain('unknown');
    const bindingReads = [...sent.values()].flat().filter(readsBinding);
    expect(bindingReads.some((s) => LOCK_CLAUSE.test(s.sql))).toBe(true);
    const [bound] = await sql(t.db, 'SELECT environment_id FROM task_environment_bindings WHERE task_id = ?', [
      c.taskId,
    ]);
    expect(bound?.environment_id).toBe(ws.sharedEnvironmentId);
  });

  it('the watch finds a read of a locked row sent again', () => {
    const lock = { sql: 'SELECT id, state FROM task_sessions WHERE id = ? FOR SHARE', params: ['s1'] };
    const again = { sql: 'SELECT id, state, task_id FROM task_sessions WHERE id = ?', params: ['s1'] };
    expect(readsAgain([lock, again])).toHaveLength(1);
    expect(readsAgain([lock, { sql: 'UPDATE task_sessions SET state = ? WHERE id = ?', params: [] }, again])).toEqual(
      [],
    );
    expect(readsAgain([lock, { ...again, params: ['s2'] }])).toEqual([]);
  });
});
