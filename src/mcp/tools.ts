/**
 * The MCP tools of taskledger, one per API command (src/api/commands):
 * create_task, find_task_by_external_id, get_task, move_task,
 * mark_task_done, delete_task, list_creation_operations,
 * get_creation_operation. Each tool's `inputSchema` is built from the same
 * JSON Schemas the REST routes compile (`../api/commands/schemas.ts`, the
 * create request's `createRequestSchema`), and arguments are validated by
 * ajv with the REST body rules (no coercion, unknown field refused) before
 * the command runs, so bad input is a tool error and nothing is written.
 *
 * A success is `{http_status, ...REST body}` (structured, and as JSON text);
 * a failure is a tool error (`isError: true`) whose body is the REST error
 * body plus `http_status`: `error` is the same stable code as over REST
 * (invalid_request, not_found, creation_state_conflict, creation_aborted...).
 */
import Ajv, { type SchemaObject, type ValidateFunction } from 'ajv';
import { createTaskCommand } from '../api/commands/create';
import type { CommandContext } from '../api/commands/context';
import { lookupByExternalIdCommand } from '../api/commands/lookup';
import {
  listOperationsCommand,
  readOperationCommand,
  type ListOperationsInput,
} from '../api/commands/operation-commands';
import { DEFAULT_WAIT_MS, listOperationsQuery, moveBody, waitMsSchema } from '../api/commands/schemas';
import {
  deleteTaskCommand,
  markTaskDoneCommand,
  moveTaskCommand,
  readTaskCommand,
} from '../api/commands/task-commands';
import { closed, uuid } from '../api/validation';
import { createRequestSchema } from '../plan/create-request-schema';

type Args = Record<string, unknown>;

export interface ToolDefinition {
  name: string;
  description: string;
  /** Advertised to clients (`tools/list`). */
  inputSchema: SchemaObject;
  /** Checked before `run`; the create request inside `create_task` is checked by Begin, as over REST. */
  validate: ValidateFunction;
  run(ctx: CommandContext, args: Args): Promise<{ status: number; body: Record<string, unknown> | null }>;
}

// The REST body rules (validation.ts), plus defaults (`wait_ms`, `limit`) and the create schema's union types.
const toolAjv = new Ajv({
  allErrors: false,
  strict: true,
  coerceTypes: false,
  useDefaults: true,
  removeAdditional: false,
  allowUnionTypes: true,
});

const taskIdInput = closed({ task_id: uuid }, ['task_id']);
const ok = (body: Record<string, unknown>) => ({ status: 200, body });

function tool(
  name: string,
  description: string,
  inputSchema: SchemaObject,
  run: ToolDefinition['run'],
  checkedSchema: SchemaObject = inputSchema,
): ToolDefinition {
  return { name, description, inputSchema, validate: toolAjv.compile(checkedSchema), run };
}

export const TOOLS: readonly ToolDefinition[] = [
  tool(
    'create_task',
    'Create a task (same request as POST /api/v1/tasks). With an external_id a retry finds the same task ' +
      '(deduplicated: true) instead of creating another. Answers within wait_ms: creation_complete false with ' +
      'deduplicated false means still being created (poll find_task_by_external_id or get_creation_operation).',
    closed({ task: createRequestSchema, wait_ms: waitMsSchema }, ['task']),
    (ctx, args) => createTaskCommand(ctx, args.task, (args.wait_ms as number | undefined) ?? DEFAULT_WAIT_MS),
    closed({ task: { type: 'object' }, wait_ms: waitMsSchema }, ['task']),
  ),
  tool(
    'find_task_by_external_id',
    'Look a task up by its external ID in a workspace; the only read that shows a task still being created.',
    closed({ workspace_id: { type: 'string' }, external_id: { type: 'string' } }, ['workspace_id', 'external_id']),
    async (ctx, args) => ok(await lookupByExternalIdCommand(ctx, args.workspace_id, { external_id: args.external_id })),
  ),
  tool('get_task', 'Read a created task (placement, blockers, session, launch).', taskIdInput, async (ctx, args) =>
    ok(await readTaskCommand(ctx, args.task_id)),
  ),
  tool(
    'move_task',
    "Move a task to another step of its workflow (WIP limits apply; a freed slot's queued tasks are promoted).",
    closed({ task_id: uuid, ...(moveBody.properties as Record<string, SchemaObject>) }, [
      'task_id',
      ...(moveBody.required as string[]),
    ]),
    async (ctx, args) => ok(await moveTaskCommand(ctx, args.task_id, args.workflow_step_id as string)),
  ),
  tool(
    'mark_task_done',
    'Mark a created task done; a repeat answers already_done: true.',
    taskIdInput,
    async (ctx, args) => ok(await markTaskDoneCommand(ctx, args.task_id)),
  ),
  tool(
    'delete_task',
    'Delete a created task; its agent, worktree, branch and session are cleaned up by cleanup jobs. ' +
      'http_status 204 with already_deleted: true when it was already deleted.',
    taskIdInput,
    async (ctx, args) => {
      const r = await deleteTaskCommand(ctx, args.task_id);
      return r.body === null ? { status: 204, body: { task_id: args.task_id, already_deleted: true } } : r;
    },
  ),
  tool(
    'list_creation_operations',
    'List creation operations, newest first (a member token sees its workspace only); page with next_cursor.',
    listOperationsQuery,
    async (ctx, args) => ok(await listOperationsCommand(ctx, args as unknown as ListOperationsInput)),
  ),
  tool(
    'get_creation_operation',
    'Show one creation operation: state, plan, steps, recovery and result.',
    closed({ operation_id: uuid }, ['operation_id']),
    async (ctx, args) => ok(await readOperationCommand(ctx, args.operation_id)),
  ),
];

export const TOOLS_BY_NAME: ReadonlyMap<string, ToolDefinition> = new Map(TOOLS.map((t) => [t.name, t]));
