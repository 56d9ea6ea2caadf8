/**
 * The ledger view (/admin/ledger) in a real headless Chromium against the real
 * API and database: an unauthorized browser sees nothing; after the login
 * form, the list renders (and updates live), a step's evidence shows with its
 * hash verified, the one legal RecoveryAction's button performs it through
 * the reaper's recovery path and the page shows the new state; a stale page
 * gets the typed conflict, shown plainly, with zero writes; workspace
 * deletions show with their counts. Both dialects.
 * With TASKLEDGER_SCREENSHOTS=<dir> the pages are also saved there (docs/img).
 */
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/log';
import { realDeps } from '../compensation/support';
import { recoverOperation } from '../../src/runtime/recover';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { expireTaskCreationLeases } from '../../src/store/lease-expiry';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import type { OperationAuthority } from '../../src/store/types';
import { requestWorkspaceDeletion } from '../../src/store/workspace-deletion';
import { launchChromium } from '../support/browser';
import { sql, useTestDb } from '../support/db';
import { begin, driveAllSteps } from '../support/ledger';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';
import { useTestApi } from './helpers';

const t = useTestDb();
const api = useTestApi(t, { listen: true });
let browser: Browser;
const contexts: BrowserContext[] = [];

beforeAll(async () => {
  browser = await launchChromium();
});
afterAll(async () => {
  for (const c of contexts) await c.close();
  await browser?.close();
});

async function freshPage(): Promise<Page> {
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  contexts.push(context);
  return context.newPage();
}

async function loggedIn(): Promise<Page> {
  const page = await freshPage();
  await page.goto(`${api.baseUrl}/admin/login`);
  await page.fill('input[name=token]', api.adminToken);
  await Promise.all([page.waitForURL(/\/admin\/ledger$/), page.click('button[type=submit]')]);
  return page;
}

async function screenshot(page: Page, name: string): Promise<void> {
  const dir = process.env.TASKLEDGER_SCREENSHOTS;
  if (dir && process.env.TASKLEDGER_TEST_DIALECT === 'postgres') {
    await page.screenshot({ path: join(dir, `${name}.png`), fullPage: true });
  }
}

/** A creation whose every step is done but Complete has not run: `complete_preparing` is its one legal action. */
async function readyToComplete(ws: SeededWorkspace) {
  const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
  return res;
}

async function opState(operationId: string) {
  const [row] = await sql<{ state: string; recovery_generation: number | string; recovery_action: string | null }>(
    t.db,
    'SELECT state, recovery_generation, recovery_action FROM task_creation_operations WHERE id = ?',
    [operationId],
  );
  return { ...row!, recovery_generation: Number(row!.recovery_generation) };
}

describe('ledger view in a real browser', () => {
  it('an unauthorized browser sees nothing of the ledger', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, {});
    const page = await freshPage();
    for (const path of ['/admin/ledger', `/admin/ledger/operations/${res.operationId}`, '/admin/ledger/deletions']) {
      await page.goto(`${api.baseUrl}${path}`);
      expect(new URL(page.url()).pathname).toBe('/admin/login');
      expect(await page.content()).not.toContain(res.operationId);
      expect(await page.locator('input[name=token]').count()).toBe(1);
    }
    const fragment = await page.goto(`${api.baseUrl}/admin/ledger?fragment=1&workspace_id=${ws.workspaceId}`);
    expect(fragment!.status()).toBe(401);
    expect(await page.content()).not.toContain(res.operationId);

    // A member token is not an operator token: the form refuses it and no cookie is set.
    await page.goto(`${api.baseUrl}/admin/login`);
    await page.fill('input[name=token]', ws.token);
    await page.click('button[type=submit]');
    await expect.poll(() => page.locator('[role=alert]').textContent()).toContain('not an operator token');
    expect(await page.context().cookies()).toEqual([]);
    await page.goto(`${api.baseUrl}/admin/ledger/operations/${res.operationId}`);
    expect(new URL(page.url()).pathname).toBe('/admin/login');
    await screenshot(page, 'ledger-login');

    // A forged session cookie opens nothing either.
    await page
      .context()
      .addCookies([{ name: 'taskledger_admin', value: `a.${Date.now() + 3_600_000}.forged`, url: api.baseUrl }]);
    await page.goto(`${api.baseUrl}/admin/ledger`);
    expect(new URL(page.url()).pathname).toBe('/admin/login');
  });

  it('lists operations newest first, filtered, and shows a new one without a reload', async () => {
    const ws = await seedWorkspace(t.db);
    const first = await begin(t.db, ws, { external_id: 'list-1' });
    const second = await begin(t.db, ws, { external_id: 'list-2' });
    const page = await loggedIn();
    await page.goto(`${api.baseUrl}/admin/ledger?workspace_id=${ws.workspaceId}`);
    const ids = await page
      .locator('#operations tbody tr')
      .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-operation-id')));
    expect(ids).toEqual([second.operationId, first.operationId]);
    expect(await page.locator(`tr[data-operation-id="${first.operationId}"] .state`).textContent()).toBe('preparing');

    // One a page: the next-page link walks the keyset cursor, newest first, to the end.
    await page.goto(`${api.baseUrl}/admin/ledger?workspace_id=${ws.workspaceId}&limit=1`);
    const walked: (string | null)[] = [];
    for (;;) {
      walked.push(await page.locator('tr[data-operation-id]').getAttribute('data-operation-id'));
      if ((await page.locator('#next-page').count()) === 0) break;
      const from = page.url();
      await Promise.all([page.waitForURL((url) => url.toString() !== from), page.click('#next-page')]);
    }
    expect(walked).toEqual([second.operationId, first.operationId]);

    // Filtered by another state: none of them.
    await page.goto(`${api.baseUrl}/admin/ledger?workspace_id=${ws.workspaceId}&state=completed`);
    expect(await page.locator('tr[data-operation-id]').count()).toBe(0);

    // Stuck for 0 minutes: both unfinished creations, each with the action it waits for.
    await page.goto(`${api.baseUrl}/admin/ledger?workspace_id=${ws.workspaceId}&stuck_minutes=0`);
    const stuckRow = (await page.locator(`tr[data-operation-id="${first.operationId}"]`).textContent()) ?? '';
    expect(stuckRow).toMatch(/(complete|resume)_preparing/);
    expect(stuckRow).toContain('a reaper to run it');
    expect(await page.locator(`tr[data-operation-id="${second.operationId}"]`).count()).toBe(1);

    // Live: a creation begun after the page loaded appears without navigation.
    await page.goto(`${api.baseUrl}/admin/ledger?workspace_id=${ws.workspaceId}`);
    // A marker on the page's global object survives only if the page is never reloaded.
    await page.evaluate('globalThis.notReloaded = true');
    const third = await begin(t.db, ws, { external_id: 'list-3' });
    await page.waitForSelector(`tr[data-operation-id="${third.operationId}"]`);
    expect(await page.evaluate('globalThis.notReloaded')).toBe(true);
    expect(await page.locator('#operations tbody tr').first().getAttribute('data-operation-id')).toBe(
      third.operationId,
    );
    await screenshot(page, 'ledger-list');
  });

  it("shows a step's evidence verified, and the legal action's button completes the creation", async () => {
    const ws = await seedWorkspace(t.db);
    const res = await readyToComplete(ws);
    const page = await loggedIn();
    await page.goto(`${api.baseUrl}/admin/ledger/operations/${res.operationId}`);
    expect(await page.locator('#operation-state').textContent()).toBe('preparing');
    const session = page.locator('tr[data-step^="session_prepare/"]');
    const evidence = session.locator('td.evidence');
    await evidence.locator('summary').click();
    expect(await evidence.locator('pre').textContent()).toContain('"version"');
    expect(await evidence.locator('[data-verified]').getAttribute('data-verified')).toBe('true');
    expect(await page.locator('[data-verified="false"]').count()).toBe(0);
    expect(await page.locator('#legal-action code[data-action]').textContent()).toBe('complete_preparing');
    // The one legal action is the only button in the action box.
    expect(await page.locator('#legal-action button').count()).toBe(1);
    await screenshot(page, 'ledger-operation');

    await Promise.all([page.waitForURL(/\/recover$/), page.click('#recover-button')]);
    expect(await page.locator('#notice').getAttribute('data-notice')).toBe('done');
    expect(await page.locator('#notice').textContent()).toContain('complete_preparing ran');
    expect(await page.locator('#operation-state').textContent()).toBe('completed');
    expect(await opState(res.operationId)).toMatchObject({
      state: 'completed',
      recovery_action: 'complete_preparing',
      recovery_generation: 1,
    });
    expect(await page.locator('#events').textContent()).toContain('task.created');
    expect(await page.locator('#legal-action code[data-action]').textContent()).toBe('replay_terminal');
    expect(await page.locator('#recover-button').count()).toBe(0);
    await screenshot(page, 'ledger-operation-completed');
  });

  it('a stale page gets the typed conflict, shown plainly, and writes nothing', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await readyToComplete(ws);
    const page = await loggedIn();
    // A stale page: its live refresh never arrives.
    await page.route('**/*fragment=1*', (route) => route.abort());
    await page.goto(`${api.baseUrl}/admin/ledger/operations/${res.operationId}`);
    expect(await page.locator('#legal-action code[data-action]').textContent()).toBe('complete_preparing');

    // Meanwhile the reaper's recovery completes it.
    const reaper = await recoverOperation(
      {
        effects: realDeps(t.db, ws.dataDir),
        handlers: defaultStepHandlers,
        queues: null,
        log: silentLogger(),
        actor: 'reaper-test',
      },
      res.operationId,
    );
    expect(reaper.action).toBe('complete_preparing');
    const before = await opState(res.operationId);

    const [response] = await Promise.all([page.waitForResponse(/\/recover$/), page.click('#recover-button')]);
    expect(response.status()).toBe(409);
    const notice = page.locator('#notice');
    expect(await notice.getAttribute('data-notice')).toBe('conflict');
    const text = (await notice.textContent()) ?? '';
    expect(text).toContain('creation_state_conflict');
    expect(text).toContain('replay_terminal');
    expect(text).toContain('complete_preparing');
    expect(await page.locator('#operation-state').textContent()).toBe('completed');
    expect(await opState(res.operationId)).toEqual(before);
    await screenshot(page, 'ledger-stale-conflict');
  });

  it('offers the resolve form when reconcile_unknown_step is the action, and records what a fresh observation agrees with', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    const [step] = await sql<{ id: string; step_key: string }>(
      t.db,
      "SELECT id, step_key FROM task_creation_steps WHERE operation_id = ? AND kind = 'session_prepare'",
      [res.operationId],
    );
    // A worker claimed the step and died before any effect: its lease expires and the step is unknown.
    await claimTaskCreationStep(t.db, auth, { kind: 'session_prepare', stepKey: step!.step_key }, 'dead-worker');
    const ago = t.db.dialect === 'postgres' ? "now() - interval '1 minute'" : 'NOW(3) - INTERVAL 1 MINUTE';
    await sql(t.db, `UPDATE task_creation_steps SET lease_expires_at = ${ago} WHERE id = ?`, [step!.id]);
    expect((await expireTaskCreationLeases(t.db, res.operationId)).steps).toBe(1);

    const page = await loggedIn();
    await page.goto(`${api.baseUrl}/admin/ledger/operations/${res.operationId}`);
    expect(await page.locator('#legal-action code[data-action]').textContent()).toBe('reconcile_unknown_step');
    const resolve = page.locator('form.resolve');
    expect(await resolve.count()).toBe(1);
    // "Present" is what the world contradicts: refused, nothing written.
    await resolve.locator('select').selectOption('succeeded');
    const [refused] = await Promise.all([page.waitForResponse(/\/resolve$/), resolve.locator('button').click()]);
    expect(refused.status()).toBe(409);
    expect(await page.locator('#notice').textContent()).toContain('observation_disagrees');
    expect(await page.locator('tr[data-step^="session_prepare/"] .state').textContent()).toBe('unknown');
    // "Absent, retry" is what it proves: recorded, and the page shows the step waiting to retry.
    await page.locator('form.resolve select').selectOption('retry_wait');
    const [accepted] = await Promise.all([
      page.waitForResponse(/\/resolve$/),
      page.locator('form.resolve button').click(),
    ]);
    expect(accepted.status()).toBe(200);
    expect(await page.locator('#notice').textContent()).toContain('resolved: retry_wait');
    expect(await page.locator('tr[data-step^="session_prepare/"] .state').textContent()).toBe('retry_wait');
    const [row] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_steps WHERE id = ?', [step!.id]);
    expect(row!.state).toBe('retry_wait');
  });

  it('shows workspace deletions with their progress and counts', async () => {
    const ws = await seedWorkspace(t.db);
    const { deletion } = await requestWorkspaceDeletion(t.db, ws.workspaceId, 'admin');
    const page = await loggedIn();
    await page.goto(`${api.baseUrl}/admin/ledger/deletions`);
    const row = page.locator(`tr[data-deletion-id="${deletion.id}"]`);
    expect(await row.textContent()).toContain(ws.workspaceId);
    expect(await row.locator('.state').textContent()).toBe('running');
    expect(await page.locator('#deletions thead').textContent()).toContain('Cleanup jobs');
    await screenshot(page, 'ledger-deletions');
  });
});
