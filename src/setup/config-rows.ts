/**
 * Workspace-owned configuration rows: agent profiles, provider connections and
 * workspace groups. Each writer is one transaction: workspace (tier 1, shared),
 * then one insert. An agent profile's executor is stored as RFC 8785 bytes
 * (`canonicalJson`), because the Store re-parses it strictly.
 */
import { randomUUID } from 'node:crypto';
import { canonicalJson } from '../canonical/canonical-json';
import type { Provider } from '../domain/vocab';
import { runTransaction, type Db } from '../db/tx';
import { lockActiveWorkspaceLocked } from './workspaces';

export interface LocalExecutor {
  kind: 'local';
  command: string[];
}

export interface AgentProfileRow {
  id: string;
  workspace_id: string;
  name: string;
  executor: LocalExecutor;
}

export async function createAgentProfile(
  db: Db,
  workspaceId: string,
  input: { name: string; executor: LocalExecutor },
): Promise<AgentProfileRow> {
  const id = randomUUID();
  const executor: LocalExecutor = { kind: input.executor.kind, command: [...input.executor.command] };
  const executorJson = canonicalJson(executor);
  await runTransaction(db, 'CreateAgentProfile', async (tx) => {
    await lockActiveWorkspaceLocked(tx, workspaceId);
    await tx.exec(
      `INSERT INTO agent_profiles (id, workspace_id, name, executor_kind, executor_json, created_at) VALUES (?, ?, ?, ?, ?, ${tx.now})`,
      [id, workspaceId, input.name, executor.kind, executorJson],
    );
  });
  return { id, workspace_id: workspaceId, name: input.name, executor };
}

export interface ProviderConnectionRow {
  id: string;
  workspace_id: string;
  provider: Provider;
  base_url: string;
}

/** The token is stored for the provider client; it is never returned by the API. */
export async function createProviderConnection(
  db: Db,
  workspaceId: string,
  input: { provider: Provider; base_url: string; token: string },
): Promise<ProviderConnectionRow> {
  const id = randomUUID();
  await runTransaction(db, 'CreateProviderConnection', async (tx) => {
    await lockActiveWorkspaceLocked(tx, workspaceId);
    await tx.exec(
      `INSERT INTO provider_connections (id, workspace_id, provider, base_url, token, created_at) VALUES (?, ?, ?, ?, ?, ${tx.now})`,
      [id, workspaceId, input.provider, input.base_url, input.token],
    );
  });
  return { id, workspace_id: workspaceId, provider: input.provider, base_url: input.base_url };
}

export interface GroupRow {
  id: string;
  workspace_id: string;
  name: string;
}

export async function createGroup(db: Db, workspaceId: string, input: { name: string }): Promise<GroupRow> {
  const id = randomUUID();
  await runTransaction(db, 'CreateGroup', async (tx) => {
    await lockActiveWorkspaceLocked(tx, workspaceId);
    await tx.exec(`INSERT INTO workspace_groups (id, workspace_id, name, created_at) VALUES (?, ?, ?, ${tx.now})`, [
      id,
      workspaceId,
      input.name,
    ]);
  });
  return { id, workspace_id: workspaceId, name: input.name };
}
