/**
 * The best-effort wake-ups a lifecycle command sends after its commit:
 * launches of tasks a freed WIP slot admitted, the workspace's outbox, the
 * cleanup worker. Each write is already committed, so a failed wake-up is
 * only logged; the reaper's next sweep does the same work.
 */
import type { CommandContext } from './context';

export async function wakeAdmitted(ctx: CommandContext, taskIds: string[]): Promise<void> {
  if (taskIds.length === 0 || !ctx.deps.wakeLaunches) return;
  await ctx.deps.wakeLaunches(taskIds).catch((err: unknown) => {
    ctx.log.warn({ err, task_ids: taskIds }, 'could not wake the launches of admitted tasks');
  });
}

export async function wakeWorkspaceOutbox(ctx: CommandContext, workspaceId: string): Promise<void> {
  await ctx.deps.wakeOutbox?.(workspaceId).catch((err: unknown) => {
    ctx.log.warn({ err, workspace_id: workspaceId }, 'could not wake the outbox dispatcher');
  });
}

export async function wakeCleanupPass(ctx: CommandContext): Promise<void> {
  await ctx.deps.wakeCleanup?.().catch((err: unknown) => {
    ctx.log.warn({ err }, 'could not wake the cleanup worker; its periodic pass runs the jobs');
  });
}
