/**
 * Every closed value set is enforced by its named CHECK with real inserts:
 * each allowed value is accepted, and an out-of-set value, a different case
 * and a trailing space are rejected by `chk_<table>_<column>` on both dialects.
 * Also the multi-column CHECKs of task_creation_steps and workflow_steps.
 */
import type { DataSource } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXPECTED_TABLES } from './expected-schema';
import { DIALECT, expectRejected, insertValid, openDataSource, selectWhere } from './helpers';

let ds: DataSource;

beforeAll(async () => {
  ds = await openDataSource();
});

afterAll(async () => {
  await ds?.destroy();
});

const CLOSED_SETS = EXPECTED_TABLES.flatMap((t) =>
  Object.entries(t.in).map(([column, values]) => [`${t.name}.${column}`, t.name, column, values] as const),
);

describe(`closed value sets (${DIALECT})`, () => {
  it('covers the sets named in the brief', () => {
    const names = CLOSED_SETS.map(([n]) => n);
    for (const n of [
      'task_creation_steps.state',
      'task_creation_operations.state',
      'task_creation_steps.kind',
      'task_creation_steps.disposition',
      'task_creation_steps.compensation_state',
      'event_outbox.type',
    ]) {
      expect(names).toContain(n);
    }
  });

  describe.each(CLOSED_SETS)('%s', (_label, table, column, values) => {
    const check = `chk_${table}_${column}`;

    it('accepts every allowed value', async () => {
      for (const value of values) {
        const row = await insertValid(ds, table, { [column]: value });
        const key = table === 'event_outbox' ? { event_id: row.event_id } : primaryKeyOf(table, row);
        const stored = await selectWhere(ds, table, key);
        expect(stored).toHaveLength(1);
        expect(stored[0]![column]).toBe(value);
      }
    });

    it(`rejects an out-of-set value with ${check}`, async () => {
      await expectRejected(insertValid(ds, table, { [column]: 'bogus' }), check);
    });

    it('rejects a different case and a trailing space (byte-exact comparison)', async () => {
      const value = values[0]!;
      await expectRejected(insertValid(ds, table, { [column]: value.toUpperCase() }), check);
      await expectRejected(insertValid(ds, table, { [column]: `${value} ` }), check);
    });
  });
});

function primaryKeyOf(table: string, row: Record<string, unknown>): Record<string, unknown> {
  const spec = EXPECTED_TABLES.find((t) => t.name === table)!;
  return Object.fromEntries(spec.primaryKey.map((c) => [c, row[c]]));
}

describe(`task_creation_steps multi-column CHECKs (${DIALECT})`, () => {
  it('allows armed and cancelled for a launch intent', async () => {
    await insertValid(ds, 'task_creation_steps', { kind: 'launch_intent', state: 'armed' });
    await insertValid(ds, 'task_creation_steps', {
      kind: 'launch_intent',
      state: 'cancelled',
      disposition: 'workspace_deleted',
    });
  });

  it('rejects armed for every kind other than launch_intent', async () => {
    for (const kind of ['workspace_attachment', 'session_prepare', 'fresh_branch_prepare']) {
      await expectRejected(
        insertValid(ds, 'task_creation_steps', { kind, state: 'armed' }),
        'chk_task_creation_steps_launch_only_states',
      );
    }
  });

  it('rejects cancelled for a non-launch kind even with the workspace-deleted disposition', async () => {
    await expectRejected(
      insertValid(ds, 'task_creation_steps', {
        kind: 'session_prepare',
        state: 'cancelled',
        disposition: 'workspace_deleted',
      }),
      'chk_task_creation_steps_launch_only_states',
    );
  });

  it('rejects a cancelled launch intent without disposition workspace_deleted', async () => {
    await expectRejected(
      insertValid(ds, 'task_creation_steps', { kind: 'launch_intent', state: 'cancelled', disposition: 'none' }),
      'chk_task_creation_steps_cancelled_disposition',
    );
  });

  it('rejects an update that cancels a launch intent without the disposition', async () => {
    const row = await insertValid(ds, 'task_creation_steps', { kind: 'launch_intent', state: 'armed' });
    const p = DIALECT === 'postgres' ? '$1' : '?';
    await expectRejected(
      ds.query(`UPDATE task_creation_steps SET state = 'cancelled' WHERE id = ${p}`, [row.id]),
      'chk_task_creation_steps_cancelled_disposition',
    );
  });

  it('allows the workspace-deleted disposition on any other state', async () => {
    await insertValid(ds, 'task_creation_steps', { state: 'failed', disposition: 'workspace_deleted' });
  });
});

describe(`workflow_steps.wip_limit (${DIALECT})`, () => {
  it('accepts 0 (the default) and positive limits, rejects a negative one', async () => {
    await insertValid(ds, 'workflow_steps', { wip_limit: 0 });
    await insertValid(ds, 'workflow_steps', { wip_limit: 5 });
    await expectRejected(insertValid(ds, 'workflow_steps', { wip_limit: -1 }), 'chk_workflow_steps_wip_limit');
  });
});
