/**
 * BeginTaskCreation: outcomes, external-ID validation and idempotency,
 * authorization without leaks, identity reuse, and "nothing written" on
 * every refusal. Runs on PostgreSQL and on MySQL/MariaDB.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { GitError } from '../../src/git/rev-parse';
import { beginTaskCreation } from '../../src/store/begin';
import { completeTaskCreation } from '../../src/store/complete';
import { count, sql, useTestDb } from '../support/db';
import { countRoundTrips, sentStatements } from '../support/round-trips';
import { killWhileInserting } from '../support/db-faults';
import { TASK_VIEW_COLUMNS } from '../../src/store/task-view';
import { begin, driveAllSteps, expectTyped } from '../support/ledger';
import { seedWorkspace } from '../support/seed';

const t = useTestDb();

afterEach(() => {
  vi.restoreAllMocks();
});

/** Revokes the workspace member's token; Begin then refuses with not_authorized and writes nothing. */
async function revokedRefused(ws: Awaited<ReturnType<typeof seedWorkspace>>): Promise<void> {
  await sql(
    t.db,
    `UPDATE api_tokens SET revoked_at = ${t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)'} WHERE id = ?`,
    [ws.member.authority_id],
  );
  await expectTyped(begin(t.db, ws, {}), 'not_authorized');
  expect(await writes(t.db, ws.workspaceId)).toEqual([0, 0, 0, 0, 0]);
}

/**
 * A trigger that fails the first insert into `table` matching `when` (SQL on `NEW`), as a deadlock would
 * (`deadlock`, retried by the runner) or with a plain error; a sequence counts the matching inserts (it is not
 * rolled back with a transaction).
 */
async function failFirstInsert(seq: string, table: string, when: string, deadlock: boolean) {
  const pg = t.db.dialect === 'postgres';
  await sql(t.db, `CREATE SEQUENCE ${seq}`);
  if (pg) {
    const raise = deadlock ? "RAISE EXCEPTION 'injected' USING ERRCODE = '40P01'" : "RAISE EXCEPTION 'injected'";
    await sql(
      t.db,
      `CREATE FUNCTION ${seq}_fn() RETURNS trigger AS $$ BEGIN
         IF ${when} AND nextval('${seq}') = 1 THEN ${raise}; END IF;
         RETURN NEW; END $$ LANGUAGE plpgsql`,
    );
    await sql(t.db, `CREATE TRIGGER ${seq}_tr BEFORE INSERT ON ${table} FOR EACH ROW EXECUTE FUNCTION ${seq}_fn()`);
  } else {
    const signal = deadlock
      ? "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'injected'"
      : "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected'";
    await sql(
      t.db,
      `CREATE TRIGGER ${seq}_tr BEFORE INSERT ON ${table} FOR EACH ROW BEGIN
         IF ${when} AND NEXTVAL(${seq}) = 1 THEN ${signal}; END IF;
       END`,
    );
  }
  return {
    async attempts(): Promise<number> {
      const [{ n }] = (await sql<{ n: number | string }>(
        t.db,
        // A PostgreSQL sequence never advanced still shows last_value 1: is_called tells.
        pg
          ? `SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS n FROM ${seq}`
          : `SELECT NEXTVAL(${seq}) - 1 AS n`,
      )) as [{ n: number | string }];
      return Number(n);
    },
    async drop(): Promise<void> {
      await sql(t.db, `DROP TRIGGER ${seq}_tr${pg ? ` ON ${table}` : ''}`);
      if (pg) await sql(t.db, `DROP FUNCTION ${seq}_fn()`);
      await sql(t.db, `DROP SEQUENCE ${seq}`);
    },
  };
}

async function writes(db: typeof t.db, workspaceId: string): Promise<number[]> {
  return Promise.all([
    count(db, 'tasks', 'workspace_id = ?', [workspaceId]),
    count(db, 'task_creation_operations', 'workspace_id = ?', [workspaceId]),
    count(db, 'task_creation_steps', 'workspace_id = ?', [workspaceId]),
    count(db, 'task_identities', 'workspace_id = ?', [workspaceId]),
    count(db, 'event_outbox', 'workspace_id = ?', [workspaceId]),
  ]);
}

describe('BeginTaskCreation outcomes', () => {
  it('Created writes task, operation, identity and one step per plan step, and no event', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { external_id: 'ext-1', start_agent: true, agent_profile_id: ws.agentProfileId });
    expect(res.outcome).toBe('Created');
    expect(res.handle).not.toBeNull();
    expect(res.handle!.operationId).toBe(res.operationId);
    expect(res.task.creation_state).toBe('preparing');
    expect(res.task.creation_complete).toBe(false);
    expect(res.task.external_id).toBe('ext-1');
    expect(res.task.workflow_step_id).toBe(ws.stepIds[0]);
    const steps = await sql<{ kind: string; state: string }>(
      t.db,
      'SELECT kind, state FROM task_creation_steps WHERE operation_id = ? ORDER BY kind',
      [res.operationId],
    );
    expect(steps.map((s) => s.kind)).toEqual(['launch_intent', 'session_prepare']);
    expect(steps.every((s) => s.state === 'planned')).toBe(true);
    expect(await writes(t.db, ws.workspaceId)).toEqual([1, 1, 2, 1, 0]);
    const op = await sql<{ completion_token_sha256: string; state: string }>(
      t.db,
      'SELECT completion_token_sha256, state FROM task_creation_operations WHERE id = ?',
      [res.operationId],
    );
    expect(op[0]!.state).toBe('preparing');
    // Only the token's SHA-256 is stored.
    expect(op[0]!.completion_token_sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(op[0]!.completion_token_sha256).not.toContain(res.handle!.completionToken);
  });

  it("Begin's inserts and the view it answers travel with COMMIT: the view is the stored row", async () => {
    const ws = await seedWorkspace(t.db);
    await begin(t.db, ws, { title: 'warm-up' });
    const trips = countRoundTrips(t.db);
    const res = await begin(t.db, ws, { title: 'counted' });
    // The warm-up's reads outside the transaction (the workspace's state, the workflow step) are remembered (ADR
    // 0052), so only the transaction goes (ADR 0028): the locks, the fences checked on the server (the remembered
    // context's among them), the operation row, task key and identity lock, the inserts, the view and COMMIT
    // together (two before: the fences' answers came back before the inserts went).
    expect(trips.calls).toBe(1);
    const stored = await sql(t.db, `SELECT ${TASK_VIEW_COLUMNS} FROM tasks WHERE id = ?`, [res.task.id]);
    expect({ ...stored[0], creation_complete: false }).toEqual(res.task);
    expect(res.task.title).toBe('counted');
  });

  it("the new task's view is its insert's answer: no read of the task follows the inserts (ADR 0051)", async () => {
    const ws = await seedWorkspace(t.db);
    const sent = sentStatements(t.db);
    const res = await begin(t.db, ws, { title: 'returned', description: 'ünïcødé ✓' });
    vi.restoreAllMocks();
    const viewReads = sent.filter((s) => s.startsWith(`SELECT ${TASK_VIEW_COLUMNS} FROM tasks`));
    // PostgreSQL and MariaDB (this suite's dialects) answer INSERT ... RETURNING; MySQL 8 would read the view.
    expect(viewReads).toEqual([]);
    expect(sent.filter((s) => /^INSERT INTO tasks [\s\S]* RETURNING id, workspace_id, title/.test(s))).toHaveLength(1);
    const stored = await sql(t.db, `SELECT ${TASK_VIEW_COLUMNS} FROM tasks WHERE id = ?`, [res.task.id]);
    expect({ ...stored[0], creation_complete: false }).toEqual(res.task);
    expect(res.task.description).toBe('ünïcødé ✓');
  });

  it('a retried external ID returns FoundUnsettled, then FoundSettled, writing nothing', async () => {
    const ws = await seedWorkspace(t.db);
    const first = await begin(t.db, ws, { external_id: 'webhook-7' });
    const before = await writes(t.db, ws.workspaceId);
    const again = await begin(t.db, ws, { external_id: 'webhook-7', title: 'a different payload' });
    expect(again.outcome).toBe('FoundUnsettled');
    expect(again.handle).toBeNull();
    expect(again.task.id).toBe(first.task.id);
    expect(again.task.title).toBe('a task');
    expect(await writes(t.db, ws.workspaceId)).toEqual(before);

    const auth = { kind: 'handle' as const, handle: first.handle! };
    await driveAllSteps(t.db, auth, first.operationId, ws.dataDir);
    await completeTaskCreation(t.db, auth);
    const settled = await begin(t.db, ws, { external_id: '  webhook-7  ' });
    expect(settled.outcome).toBe('FoundSettled');
    expect(settled.task.creation_complete).toBe(true);
    expect(settled.handle).toBeNull();
  });

  it('a found external ID wins over a malformed rest of the request (lookup before validation)', async () => {
    const ws = await seedWorkspace(t.db);
    const first = await begin(t.db, ws, { external_id: 'dup' });
    const again = await begin(t.db, ws, { external_id: 'dup', bogus_field: 1, repositories: 'nope' });
    expect(again.outcome).toBe('FoundUnsettled');
    expect(again.task.id).toBe(first.task.id);
  });

  it('after a lookup miss, a pre-insert failure re-reads the ID and returns the task that now holds it', async () => {
    const ws = await seedWorkspace(t.db);
    let raced: string | null = null;
    const res = await beginTaskCreation(
      t.db,
      ws.member,
      {
        workspace_id: ws.workspaceId,
        title: 'slow one',
        external_id: 'race-ext',
        repositories: [{ repository_id: ws.repositoryId }],
      },
      {
        dataDir: ws.dataDir,
        resolveCommit: async () => {
          // Another request takes the ID while this one resolves its repository, then this one fails.
          raced = (await begin(t.db, ws, { external_id: 'race-ext' })).task.id;
          throw new GitError('simulated: repository vanished', 'not_a_repository');
        },
      },
    );
    expect(res.outcome).toBe('FoundUnsettled');
    expect(res.task.id).toBe(raced);
  });

  it('two concurrent Begins with one external ID create exactly one task and no orphan rows', async () => {
    const ws = await seedWorkspace(t.db);
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        begin(t.db, ws, {
          external_id: 'concurrent',
          title: `attempt ${i}`,
          start_agent: true,
          agent_profile_id: ws.agentProfileId,
        }),
      ),
    );
    const created = results.filter((r) => r.outcome === 'Created');
    expect(created).toHaveLength(1);
    expect(results.filter((r) => r.outcome === 'FoundUnsettled')).toHaveLength(5);
    expect(new Set(results.map((r) => r.task.id)).size).toBe(1);
    // One task, one operation, its two steps, one identity: nothing orphaned by the losers.
    expect(await writes(t.db, ws.workspaceId)).toEqual([1, 1, 2, 1, 0]);
  });

  // Without an external ID, PostgreSQL sends the operation row, the task key and the identity lock in one round trip.
  it.each([
    ['with an external ID', { external_id: 'other' }],
    ['without one', {}],
  ])('a reused task identity returns task_identity_reused with nothing written (%s)', async (_name, extra) => {
    const ws = await seedWorkspace(t.db);
    const taskId = randomUUID();
    await begin(t.db, ws, { task_id: taskId });
    const before = await writes(t.db, ws.workspaceId);
    await expectTyped(begin(t.db, ws, { task_id: taskId, ...extra }), 'task_identity_reused');
    expect(await writes(t.db, ws.workspaceId)).toEqual(before);
  });
});

describe('external-ID validation (companion notes order)', () => {
  it.each([
    ['NUL', 'a\u0000b'],
    ['tab before trimming', '\tabc'],
    ['newline inside', 'ab\ncd'],
    ['unit separator', 'x\u001f'],
    ['DEL', 'x\u007f'],
  ])('rejects a control character (%s) with a typed error and no writes', async (_name, value) => {
    const ws = await seedWorkspace(t.db);
    await expect(begin(t.db, ws, { external_id: value })).rejects.toMatchObject({
      code: 'invalid_external_id',
      field: '/external_id',
    });
    expect(await writes(t.db, ws.workspaceId)).toEqual([0, 0, 0, 0, 0]);
  });

  it('trims white space, and treats empty or blank as absent', async () => {
    const ws = await seedWorkspace(t.db);
    const a = await begin(t.db, ws, { external_id: '  spaced  ' });
    expect(a.task.external_id).toBe('spaced');
    const b = await begin(t.db, ws, { external_id: '   ' });
    const c = await begin(t.db, ws, { external_id: '' });
    expect(b.outcome).toBe('Created');
    expect(c.outcome).toBe('Created');
    expect(b.task.external_id).toBeNull();
    expect(c.task.external_id).toBeNull();
    expect(b.task.id).not.toBe(c.task.id);
  });

  it('accepts 255 UTF-8 bytes and rejects 256', async () => {
    const ws = await seedWorkspace(t.db);
    const ok = await begin(t.db, ws, { external_id: 'é'.repeat(127) + 'a' });
    expect(ok.outcome).toBe('Created');
    expect(ok.task.external_id).toBe('é'.repeat(127) + 'a');
    await expect(begin(t.db, ws, { external_id: 'é'.repeat(127) + 'aa' })).rejects.toMatchObject({
      code: 'invalid_external_id',
    });
    await expect(begin(t.db, ws, { external_id: 'x'.repeat(256) })).rejects.toMatchObject({
      code: 'invalid_external_id',
    });
    expect((await begin(t.db, ws, { external_id: 'x'.repeat(255) })).outcome).toBe('Created');
  });

  it('matches byte-exactly: case and trailing characters make different IDs', async () => {
    const ws = await seedWorkspace(t.db);
    const upper = await begin(t.db, ws, { external_id: 'Ticket-9' });
    const lower = await begin(t.db, ws, { external_id: 'ticket-9' });
    expect(lower.outcome).toBe('Created');
    expect(lower.task.id).not.toBe(upper.task.id);
    const same = await begin(t.db, ws, { external_id: 'Ticket-9' });
    expect(same.outcome).toBe('FoundUnsettled');
    expect(same.task.id).toBe(upper.task.id);
  });
});

describe('authorization', () => {
  it('a caller without access gets not_authorized and learns nothing, even for a malformed or existing ID', async () => {
    const ws = await seedWorkspace(t.db);
    const other = await seedWorkspace(t.db);
    await begin(t.db, ws, { external_id: 'secret-ticket' });
    const before = await writes(t.db, ws.workspaceId);
    for (const external_id of ['secret-ticket', 'never-used', 'bad\u0000id', 'x'.repeat(300)]) {
      const err = await begin(t.db, ws, { external_id }, other.member).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'not_authorized', message: 'task not created' });
    }
    await expectTyped(begin(t.db, { ...ws, workspaceId: randomUUID() }, {}, ws.operator), 'not_authorized');
    await expectTyped(
      beginTaskCreation(t.db, ws.member, { workspace_id: 'not-a-uuid', title: 'x' }, { dataDir: ws.dataDir }),
      'not_authorized',
    );
    expect(await writes(t.db, ws.workspaceId)).toEqual(before);
  });

  it('a revoked token cannot begin', async () => {
    const ws = await seedWorkspace(t.db);
    await revokedRefused(ws);
  });

  it('refuses under an active archive or deletion barrier (checked in the transaction), writing nothing', async () => {
    const ws = await seedWorkspace(t.db);
    const barrier = randomUUID();
    await sql(
      t.db,
      "INSERT INTO archive_membership_barriers (operation_id, scope_workspace_id, kind, state) VALUES (?, ?, 'archive', 'active')",
      [barrier, ws.workspaceId],
    );
    await expectTyped(begin(t.db, ws, {}), 'creation_state_conflict');
    expect(await writes(t.db, ws.workspaceId)).toEqual([0, 0, 0, 0, 0]);
    // Released, it fences nothing.
    await sql(t.db, "UPDATE archive_membership_barriers SET state = 'released' WHERE operation_id = ?", [barrier]);
    expect((await begin(t.db, ws, {})).outcome).toBe('Created');
  });
});

describe('bad input', () => {
  it.each([
    [{ bogus: true }, '/bogus'],
    [{ title: '' }, '/title'],
    [{ title: 7 }, '/title'],
    [{ repositories: [{ repository_id: randomUUID() }] }, '/repositories/0/repository_id'],
    [{ repositories: [{ repository_id: 'NOT-A-UUID' }] }, '/repositories/0/repository_id'],
    [{ attachments: [randomUUID()] }, '/attachments/0'],
    [{ start_agent: true }, '/agent_profile_id'],
    [{ start_agent: 'yes' }, '/start_agent'],
    [{ blocked_by: [randomUUID()] }, '/blocked_by/0'],
    [{ parent_id: randomUUID() }, '/parent_id'],
    [{ workflow_step_id: randomUUID() }, '/workflow_step_id'],
    [
      {
        contributions: [
          {
            provider: 'github',
            connection_id: randomUUID(),
            repository_id: randomUUID(),
            contribution_kind: 'merge_request',
            contribution_id: '1',
          },
        ],
      },
      '/contributions/0',
    ],
  ])('rejects %j naming %s, before anything is written', async (body, field) => {
    const ws = await seedWorkspace(t.db);
    const err = (await begin(t.db, ws, body as Record<string, unknown>).catch((e: unknown) => e)) as {
      code: string;
      field: string;
    };
    expect(err.code).toBe('invalid_request');
    expect(err.field.startsWith(field)).toBe(true);
    expect(await writes(t.db, ws.workspaceId)).toEqual([0, 0, 0, 0, 0]);
  });

  it('with several unknown references, names the first in the order they are checked, every time', async () => {
    const ws = await seedWorkspace(t.db);
    // The references resolve concurrently; the error is still the first one's (workflow step, then parent, then
    // blockers, ..., then the agent profile), whichever read answers first.
    const body = {
      workflow_step_id: randomUUID(),
      parent_id: randomUUID(),
      blocked_by: [randomUUID()],
      attachments: [randomUUID()],
      start_agent: true,
      agent_profile_id: randomUUID(),
    };
    for (const [drop, field] of [
      [[], '/workflow_step_id'],
      [['workflow_step_id'], '/parent_id'],
      [['workflow_step_id', 'parent_id'], '/blocked_by/0'],
      [['workflow_step_id', 'parent_id', 'blocked_by'], '/attachments/0'],
      [['workflow_step_id', 'parent_id', 'blocked_by', 'attachments'], '/agent_profile_id'],
    ] as const) {
      const rest: Record<string, unknown> = { ...body };
      for (const k of drop) delete rest[k];
      for (let i = 0; i < 3; i++) {
        await expect(begin(t.db, ws, rest)).rejects.toMatchObject({ code: 'invalid_request', field });
      }
    }
    expect(await writes(t.db, ws.workspaceId)).toEqual([0, 0, 0, 0, 0]);
  });

  it('rejects a repository path that is not a Git repository, naming the repository', async () => {
    const ws = await seedWorkspace(t.db);
    await sql(t.db, 'UPDATE repositories SET path = ? WHERE id = ?', [ws.dataDir, ws.repositoryId]);
    await expect(begin(t.db, ws, { repositories: [{ repository_id: ws.repositoryId }] })).rejects.toMatchObject({
      code: 'invalid_request',
      field: '/repositories/0/repository_id',
    });
    await expect(
      begin(t.db, { ...ws }, { repositories: [{ repository_id: ws.repositoryId, base_branch: 'nope' }] }),
    ).rejects.toMatchObject({
      code: 'invalid_request',
    });
    expect(await writes(t.db, ws.workspaceId)).toEqual([0, 0, 0, 0, 0]);
  });

  it('rejects a body that is not an object', async () => {
    const ws = await seedWorkspace(t.db);
    for (const body of [null, [], 'text', 42]) {
      await expect(beginTaskCreation(t.db, ws.member, body, { dataDir: ws.dataDir })).rejects.toMatchObject({
        code: 'invalid_request',
        field: '/',
      });
    }
  });

  it('refuses to create in a workspace that is being deleted, as in one that does not exist', async () => {
    const ws = await seedWorkspace(t.db);
    await sql(t.db, "UPDATE workspaces SET state = 'deleting' WHERE id = ?", [ws.workspaceId]);
    await expectTyped(begin(t.db, ws, {}), 'not_authorized');
    // The workspace's state is read alongside the references, but still answers first: a bad field or an unknown
    // reference in a workspace being deleted is `not_authorized`, not a validation error.
    await expectTyped(begin(t.db, ws, { title: 42 }), 'not_authorized');
    await expectTyped(begin(t.db, ws, { agent_profile_id: randomUUID(), start_agent: true }), 'not_authorized');
    expect(await writes(t.db, ws.workspaceId)).toEqual([0, 0, 0, 0, 0]);
    // The same requests in an active workspace are refused for what they are.
    await sql(t.db, "UPDATE workspaces SET state = 'active' WHERE id = ?", [ws.workspaceId]);
    await expectTyped(begin(t.db, ws, { title: 42 }), 'invalid_request');
    await expectTyped(begin(t.db, ws, { agent_profile_id: randomUUID(), start_agent: true }), 'invalid_request');
  });
});

describe('parents and blockers must be settled', () => {
  it('a task still being created is neither a parent nor a blocker (nothing written); once created it is', async () => {
    const ws = await seedWorkspace(t.db);
    const open = await begin(t.db, ws, { title: 'not created yet' });
    for (const [body, field] of [
      [{ blocked_by: [open.task.id] }, '/blocked_by/0'],
      [{ parent_id: open.task.id }, '/parent_id'],
    ] as const) {
      await expect(begin(t.db, ws, body)).rejects.toMatchObject({ code: 'invalid_request', field });
    }
    expect(await count(t.db, 'task_creation_operations', 'workspace_id = ?', [ws.workspaceId])).toBe(1);
    await driveAllSteps(t.db, { kind: 'handle', handle: open.handle! }, open.operationId, ws.dataDir);
    await completeTaskCreation(t.db, { kind: 'handle', handle: open.handle! });
    expect((await begin(t.db, ws, { blocked_by: [open.task.id] })).outcome).toBe('Created');
    expect((await begin(t.db, ws, { parent_id: open.task.id })).outcome).toBe('Created');
  });
});

describe('a Begin whose inserts fail with COMMIT', () => {
  it('restarts cleanly: the failed attempt leaves no answer pending, the next one creates the task', async () => {
    const ws = await seedWorkspace(t.db);
    const tag = `fail-once-${randomUUID()}`;
    // A trigger fails the first insert of a task with this title as a deadlock would; the runner restarts Begin.
    const trigger = await failFirstInsert(`tl_fail_${tag.slice(-12)}`, 'tasks', `NEW.title = '${tag}'`, true);
    try {
      const res = await begin(t.db, ws, { title: tag });
      expect(res.outcome).toBe('Created');
      expect(res.task.title).toBe(tag);
      // Two attempts: the first failed at its final batch, the second committed.
      expect(await trigger.attempts()).toBe(2);
      expect(await count(t.db, 'tasks', 'title = ?', [tag])).toBe(1);
    } finally {
      await trigger.drop();
    }
  });
});

describe('Begin in one round trip: a statement after the fences that fails on the server (ADR 0028)', () => {
  it('fails Begin with its error, writing nothing; the next Begin creates the task', async () => {
    const ws = await seedWorkspace(t.db);
    // A trigger fails the first operation row of this workspace with an error that is not retried.
    const trigger = await failFirstInsert(
      `tl_once_${randomUUID().replace(/-/g, '').slice(0, 12)}`,
      'task_creation_operations',
      `NEW.workspace_id = '${ws.workspaceId}'`,
      false,
    );
    try {
      // Every fence passed: the checked path would send the same row and fail the same way, so it is not tried.
      await expect(begin(t.db, ws, {})).rejects.toThrow(/injected/);
      expect(await trigger.attempts()).toBe(1);
      expect(await writes(t.db, ws.workspaceId)).toEqual([0, 0, 0, 0, 0]);
      expect((await begin(t.db, ws, {})).outcome).toBe('Created');
    } finally {
      await trigger.drop();
    }
  });

  it('a fence that fails before it: the refusal, and the row never reached the server', async () => {
    const ws = await seedWorkspace(t.db);
    const trigger = await failFirstInsert(
      `tl_fence_${randomUUID().replace(/-/g, '').slice(0, 12)}`,
      'task_creation_operations',
      `NEW.workspace_id = '${ws.workspaceId}'`,
      false,
    );
    try {
      // Revoked: the authority fence fails first; the checked path then refuses before inserting anything.
      await revokedRefused(ws);
      expect(await trigger.attempts()).toBe(0);
    } finally {
      await trigger.drop();
    }
  });
});

describe('Begin in one round trip, its fences checked on the server (ADR 0028)', () => {
  /** Begins a task in `ws`'s repository; `between` runs after Begin's reads, before its transaction (Git's turn). */
  function beginWithGap(ws: Awaited<ReturnType<typeof seedWorkspace>>, body: object, between: () => Promise<unknown>) {
    return beginTaskCreation(
      t.db,
      ws.member,
      { workspace_id: ws.workspaceId, title: 'gap', repositories: [{ repository_id: ws.repositoryId }], ...body },
      {
        dataDir: ws.dataDir,
        resolveCommit: async () => {
          await between();
          return 'a'.repeat(40);
        },
      },
    );
  }

  it('a workspace that began its deletion after the reads: not_authorized, nothing written', async () => {
    const ws = await seedWorkspace(t.db);
    await expectTyped(
      beginWithGap(ws, {}, () => sql(t.db, "UPDATE workspaces SET state = 'deleting' WHERE id = ?", [ws.workspaceId])),
      'not_authorized',
    );
    expect(await writes(t.db, ws.workspaceId)).toEqual([0, 0, 0, 0, 0]);
  });

  it('a workflow step removed after the reads: invalid_request naming it, nothing written', async () => {
    const ws = await seedWorkspace(t.db);
    const stepId = ws.stepIds[0]!;
    await expect(
      beginWithGap(ws, { workflow_step_id: stepId }, () =>
        sql(t.db, 'UPDATE workflow_steps SET workspace_id = ? WHERE id = ?', [randomUUID(), stepId]),
      ),
    ).rejects.toMatchObject({ code: 'invalid_request', detail: { field: '/workflow_step_id' } });
    expect(await writes(t.db, ws.workspaceId)).toEqual([0, 0, 0, 0, 0]);
  });

  it('a token revoked after the reads: not_authorized, nothing written; unchanged, Created in one round trip', async () => {
    const ws = await seedWorkspace(t.db);
    await begin(t.db, ws, { title: 'warm-up' });
    const trips = countRoundTrips(t.db);
    const created = await beginWithGap(ws, {}, async () => undefined);
    expect(created.outcome).toBe('Created');
    // The reads, then the transaction: its fences, locks, inserts and COMMIT together.
    expect(trips.calls).toBe(2);
    const before = await writes(t.db, ws.workspaceId);
    await expectTyped(
      beginWithGap(ws, {}, () =>
        sql(
          t.db,
          `UPDATE api_tokens SET revoked_at = ${t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)'} WHERE id = ?`,
          [ws.member.authority_id],
        ),
      ),
      'not_authorized',
    );
    expect(await writes(t.db, ws.workspaceId)).toEqual(before);
  });
});

describe('Begin in one round trip: a connection lost during its COMMIT (ADR 0028)', () => {
  it('is retried, and the retry creates the task exactly once', async () => {
    const ws = await seedWorkspace(t.db);
    const title = `lost-${randomUUID()}`;
    let res: Awaited<ReturnType<typeof begin>> | undefined;
    // Every insert of a task with this title waits in a trigger, and Begin's one round trip is killed meanwhile.
    const killed = await killWhileInserting(t.db, 'tasks', `NEW.title = '${title}'`, ws.workspaceId, async () => {
      res = await begin(t.db, ws, { title });
    });
    expect(killed).toBe(1);
    expect(res!.outcome).toBe('Created');
    expect(await count(t.db, 'tasks', 'title = ?', [title])).toBe(1);
    expect(await count(t.db, 'task_creation_operations', 'task_id = ?', [res!.task.id])).toBe(1);
  });

  it('a retry that finds its own operation row committed answers Created from the stored rows, writing nothing', async () => {
    const ws = await seedWorkspace(t.db);
    // The same IDs twice: the second Begin stands for the attempt after a COMMIT whose answer was lost.
    const ids = Array.from({ length: 40 }, () => randomUUID());
    const newId = () => {
      let i = 0;
      return () => ids[i++]!;
    };
    const body = { workspace_id: ws.workspaceId, title: 'committed once' };
    const first = await beginTaskCreation(t.db, ws.member, body, { dataDir: ws.dataDir, newId: newId() });
    const before = await writes(t.db, ws.workspaceId);
    const again = await beginTaskCreation(t.db, ws.member, body, { dataDir: ws.dataDir, newId: newId() });
    expect(again.outcome).toBe('Created');
    expect(again.task).toEqual(first.task);
    expect(again.steps).toEqual(first.steps);
    expect(again.operationId).toBe(first.operationId);
    expect(await writes(t.db, ws.workspaceId)).toEqual(before);
  });
});
