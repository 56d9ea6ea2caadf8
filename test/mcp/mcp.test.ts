/**
 * The MCP server against a real fleet, with the SDK's own client: streamable
 * HTTP at POST /mcp on the API port (bearer workspace token) and stdio
 * (`taskledger mcp`, a subprocess). Tool schemas are the REST schemas, the
 * four create outcomes and the lifecycle tools answer as REST does, and
 * errors are tool errors with the REST codes, written before nothing.
 * Both dialects.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, describe, expect, it } from 'vitest';
import { listOperationsQuery, moveBody } from '../../src/api/commands/schemas';
import { createRequestSchema } from '../../src/plan/create-request-schema';
import { count, useTestDb } from '../support/db';
import { seedWorkspace } from '../support/seed';
import { useWorld, type FleetWorld } from '../fleet/support';

const t = useTestDb();
let w: FleetWorld;
useWorld(t, (world) => (w = world));

const clients: Client[] = [];
afterAll(async () => {
  for (const c of clients) await c.close();
});

async function httpClient(token: string): Promise<Client> {
  const client = new Client({ name: 'taskledger-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${w.baseUrl}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  clients.push(client);
  return client;
}

type Body = Record<string, any>;
async function callTool(client: Client, name: string, args: Record<string, unknown>) {
  const res = await client.callTool({ name, arguments: args });
  const body = res.structuredContent as Body;
  // The text content carries the same JSON for clients that ignore structured content.
  expect(JSON.parse((res.content as { type: string; text: string }[])[0]!.text)).toEqual(body);
  return { isError: res.isError === true, body };
}

describe('MCP over streamable HTTP', () => {
  it('lists every tool with the REST JSON Schemas as input schemas', async () => {
    const client = await httpClient(w.ws.token);
    const { tools } = await client.listTools();
    const byName = new Map(tools.map((x) => [x.name, x]));
    expect([...byName.keys()].sort()).toEqual(
      [
        'create_task',
        'delete_task',
        'find_task_by_external_id',
        'get_creation_operation',
        'get_task',
        'list_creation_operations',
        'mark_task_done',
        'move_task',
      ].sort(),
    );
    expect((byName.get('create_task')!.inputSchema.properties as Body).task).toEqual(createRequestSchema);
    expect((byName.get('move_task')!.inputSchema.properties as Body).workflow_step_id).toEqual(
      (moveBody.properties as Body).workflow_step_id,
    );
    expect(byName.get('list_creation_operations')!.inputSchema).toEqual(listOperationsQuery);
  });

  it('create_task: Created, then FoundSettled for a retry by external ID; lookup, read and operations agree', async () => {
    const client = await httpClient(w.ws.token);
    const task = { workspace_id: w.ws.workspaceId, title: 'from an agent', external_id: 'mcp-1' };
    const first = await callTool(client, 'create_task', { task, wait_ms: 20_000 });
    expect(first.isError).toBe(false);
    expect(first.body).toMatchObject({ http_status: 200, deduplicated: false, creation_complete: true });
    expect(first.body.task.external_id).toBe('mcp-1');
    const ops = await count(t.db, 'task_creation_operations', 'workspace_id = ?', [w.ws.workspaceId]);

    const retry = await callTool(client, 'create_task', { task: { ...task, title: 'other' } });
    expect(retry.body).toMatchObject({ http_status: 200, deduplicated: true, creation_complete: true });
    expect(retry.body.task).toMatchObject({ id: first.body.task.id, title: 'from an agent' });
    expect(await count(t.db, 'task_creation_operations', 'workspace_id = ?', [w.ws.workspaceId])).toBe(ops);

    const found = await callTool(client, 'find_task_by_external_id', {
      workspace_id: w.ws.workspaceId,
      external_id: 'mcp-1',
    });
    expect(found.body).toMatchObject({ http_status: 200, creation_complete: true, task: { id: first.body.task.id } });

    const read = await callTool(client, 'get_task', { task_id: first.body.task.id });
    expect(read.body.task).toMatchObject({ id: first.body.task.id, creation_complete: true });

    const listed = await callTool(client, 'list_creation_operations', { limit: 200 });
    expect(listed.body.operations.map((o: Body) => o.id)).toContain(first.body.operation_id);
    const shown = await callTool(client, 'get_creation_operation', { operation_id: first.body.operation_id });
    expect(shown.body).toMatchObject({ id: first.body.operation_id, state: 'completed' });
  });

  it('move_task, mark_task_done (then already_done) and delete_task (then already_deleted)', async () => {
    const client = await httpClient(w.ws.token);
    const created = await callTool(client, 'create_task', {
      task: { workspace_id: w.ws.workspaceId, title: 'to move' },
      wait_ms: 20_000,
    });
    const id = created.body.task.id as string;
    const moved = await callTool(client, 'move_task', { task_id: id, workflow_step_id: w.ws.stepIds[1] });
    expect(moved.isError).toBe(false);
    expect(moved.body).toMatchObject({ http_status: 200, moved: true });
    const done = await callTool(client, 'mark_task_done', { task_id: id });
    expect(done.body).toMatchObject({ http_status: 200, already_done: false });
    const again = await callTool(client, 'mark_task_done', { task_id: id });
    expect(again.body).toMatchObject({ http_status: 200, already_done: true });
    const deleted = await callTool(client, 'delete_task', { task_id: id });
    expect(deleted.body).toMatchObject({ http_status: 202, task_id: id });
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.deleted'", [id])).toBe(1);
    const twice = await callTool(client, 'delete_task', { task_id: id });
    expect(twice.body).toEqual({ http_status: 204, task_id: id, already_deleted: true });
    const gone = await callTool(client, 'get_task', { task_id: id });
    expect(gone).toMatchObject({ isError: true, body: { http_status: 404, error: 'not_found' } });
  });

  it('bad input is a tool error with the REST code and field, and writes nothing', async () => {
    const client = await httpClient(w.ws.token);
    const before = await count(t.db, 'task_creation_operations', 'workspace_id = ?', [w.ws.workspaceId]);
    const unknownField = await callTool(client, 'create_task', {
      task: { workspace_id: w.ws.workspaceId, title: 'x', colour: 'red' },
    });
    expect(unknownField).toMatchObject({
      isError: true,
      body: { http_status: 400, error: 'invalid_request', detail: { field: '/colour' } },
    });
    const badWait = await callTool(client, 'create_task', {
      task: { workspace_id: w.ws.workspaceId, title: 'x' },
      wait_ms: -1,
    });
    expect(badWait).toMatchObject({ isError: true, body: { error: 'invalid_request', detail: { field: '/wait_ms' } } });
    const badExternalId = await callTool(client, 'create_task', {
      task: { workspace_id: w.ws.workspaceId, title: 'x', external_id: 'a\u0001b' },
    });
    expect(badExternalId).toMatchObject({ isError: true, body: { error: 'invalid_external_id' } });
    const badMove = await callTool(client, 'move_task', { task_id: 'not-a-uuid', workflow_step_id: w.ws.stepIds[1] });
    expect(badMove).toMatchObject({ isError: true, body: { error: 'invalid_request', detail: { field: '/task_id' } } });
    expect(await count(t.db, 'task_creation_operations', 'workspace_id = ?', [w.ws.workspaceId])).toBe(before);
  });

  it("another workspace's token sees 404 not_found and cannot create in this workspace", async () => {
    const mine = await callTool(await httpClient(w.ws.token), 'create_task', {
      task: { workspace_id: w.ws.workspaceId, title: 'private', external_id: 'mcp-private' },
      wait_ms: 20_000,
    });
    const other = await seedWorkspace(t.db);
    const outsider = await httpClient(other.token);
    const read = await callTool(outsider, 'get_task', { task_id: mine.body.task.id });
    expect(read).toMatchObject({ isError: true, body: { http_status: 404, error: 'not_found' } });
    const lookup = await callTool(outsider, 'find_task_by_external_id', {
      workspace_id: w.ws.workspaceId,
      external_id: 'mcp-private',
    });
    expect(lookup).toMatchObject({ isError: true, body: { http_status: 404, error: 'not_found' } });
    const create = await callTool(outsider, 'create_task', { task: { workspace_id: w.ws.workspaceId, title: 'x' } });
    expect(create).toMatchObject({ isError: true, body: { http_status: 404, error: 'task not created' } });
  });

  it('refuses a request without a valid bearer token with 401', async () => {
    const res = await fetch(`${w.baseUrl}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ error: 'unauthorized' });
    const bad = new Client({ name: 'taskledger-test', version: '1.0.0' });
    await expect(
      bad.connect(
        new StreamableHTTPClientTransport(new URL(`${w.baseUrl}/mcp`), {
          requestInit: { headers: { authorization: 'Bearer nope' } },
        }),
      ),
    ).rejects.toThrow();
  });
});

describe('MCP over stdio (taskledger mcp)', () => {
  it('serves the tools for the token in TASKLEDGER_TOKEN; the fleet drives the creation', async () => {
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined) env[k] = v;
    Object.assign(env, {
      TASKLEDGER_TOKEN: w.ws.token,
      TASKLEDGER_QUEUE_PREFIX: w.config.queuePrefix,
      TASKLEDGER_DATA_DIR: w.config.dataDir,
      TASKLEDGER_LOG_LEVEL: 'warn',
    });
    const client = new Client({ name: 'taskledger-test', version: '1.0.0' });
    await client.connect(
      new StdioClientTransport({ command: process.execPath, args: ['bin/taskledger.mjs', 'mcp'], env, stderr: 'pipe' }),
    );
    clients.push(client);
    const { tools } = await client.listTools();
    expect(tools.map((x) => x.name)).toContain('create_task');
    const created = await callTool(client, 'create_task', {
      task: { workspace_id: w.ws.workspaceId, title: 'over stdio', external_id: 'mcp-stdio' },
      wait_ms: 20_000,
    });
    expect(created.body).toMatchObject({ http_status: 200, deduplicated: false, creation_complete: true });
    const found = await callTool(client, 'find_task_by_external_id', {
      workspace_id: w.ws.workspaceId,
      external_id: 'mcp-stdio',
    });
    expect(found.body.task.id).toBe(created.body.task.id);
  });
});
