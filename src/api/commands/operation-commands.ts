/**
 * The creation-operation read commands (`GET /creation-operations/:id`,
 * MCP `get_creation_operation`; `GET /creation-operations`, MCP
 * `list_creation_operations`). Operators see every operation; a member only
 * its workspace's (404 for any other, exactly as for a missing one), and a
 * member's list is confined to its workspace (naming another is 404).
 */
import { isUuid, mayRead } from '../auth';
import { notFound } from '../errors';
import { listOperations, readOperation } from '../operation-view';
import type { CommandContext } from './context';

export interface ListOperationsInput {
  state?: string;
  workspace_id?: string;
  limit: number;
  cursor?: string;
}

export async function readOperationCommand(
  ctx: CommandContext,
  operationId: unknown,
): Promise<Record<string, unknown>> {
  if (!isUuid(operationId)) throw notFound('creation operation');
  const op = await readOperation(ctx.deps.db, operationId);
  if (!op || !mayRead(ctx.principal, String(op.workspace_id))) throw notFound('creation operation');
  return op;
}

export async function listOperationsCommand(ctx: CommandContext, input: ListOperationsInput) {
  let workspaceId = input.workspace_id;
  if (ctx.principal.workspace_id !== null) {
    if (workspaceId !== undefined && workspaceId !== ctx.principal.workspace_id) throw notFound('workspace');
    workspaceId = ctx.principal.workspace_id;
  }
  return listOperations(ctx.deps.db, { state: input.state, workspaceId, limit: input.limit, cursor: input.cursor });
}
