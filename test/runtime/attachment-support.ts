/**
 * A creation with an `attachment_claim` and a `fresh_branch_prepare` step,
 * helpers to drive the claim with its real handler, to fail the branch step
 * permanently, to run the reaper's sweep on the workspace, and to read what
 * of the claim is left on disk and in the ledger.
 */
import { existsSync, readdirSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Db } from '../../src/db/tx';
import { silentLogger } from '../../src/log';
import { sweepOnce } from '../../src/runtime/reaper';
import { attachmentClaimHandler } from '../../src/kinds/attachment-claim/step';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { claimedAttachmentPath, stagedAttachmentPath } from '../../src/storage/paths';
import { attachmentMarkerKey } from '../../src/kinds/attachment-claim/marker';
import { failTaskCreationStep } from '../../src/store/step-results';
import { count, sql } from '../support/db';
import { permanentFailure } from '../support/evidence';
import { claimKind, createTask, noHeartbeat, seedWithFiles } from '../steps/support';

export async function attachmentCreation(db: Db) {
  const { ws, deps, files } = await seedWithFiles(db);
  const c = await createTask(db, ws, {
    attachments: ws.attachmentIds,
    repositories: [{ repository_id: ws.repositoryId }],
  });
  const claimedDir = dirname(claimedAttachmentPath(ws.dataDir, c.taskId, ws.attachmentIds[0]!));
  return {
    ws,
    deps,
    files,
    c,
    staged: (id: string) => stagedAttachmentPath(ws.dataDir, ws.workspaceId, id),
    /** What is left in the task's attachment directory. */
    copies: () => (existsSync(claimedDir) ? readdirSync(claimedDir).sort() : []),
    markers: () => count(db, 'task_resource_markers', 'resource_key = ?', [attachmentMarkerKey(c.taskId)]),
    claimAttachments: async (owner = 'w1') => claimKind(db, c.auth, c.operationId, 'attachment_claim', owner),
    performAttachments: async (owner = 'w1') =>
      attachmentClaimHandler.perform(
        deps,
        await claimKind(db, c.auth, c.operationId, 'attachment_claim', owner),
        noHeartbeat,
      ),
    /** The branch step fails permanently (its effect proven absent): the creation must abort. */
    failBranch: async () => {
      const claim = await claimKind(db, c.auth, c.operationId, 'fresh_branch_prepare');
      return failTaskCreationStep(db, claim, permanentFailure(claim, 'base_commit_missing'));
    },
    sweep: () =>
      sweepOnce({
        effects: deps,
        handlers: defaultStepHandlers,
        queues: null,
        log: silentLogger(),
        actor: 'reaper:attachments',
        workspaceId: ws.workspaceId,
      }),
    opState: async () =>
      (await sql<{ state: string }>(db, 'SELECT state FROM task_creation_operations WHERE id = ?', [c.operationId]))[0]!
        .state,
    stepOf: async (kind: string) =>
      (
        await sql<{ state: string; compensation_state: string }>(
          db,
          'SELECT state, compensation_state FROM task_creation_steps WHERE operation_id = ? AND kind = ?',
          [c.operationId, kind],
        )
      )[0]!,
    ownerKinds: async () =>
      (
        await sql<{ owner_kind: string }>(
          db,
          'SELECT owner_kind FROM task_message_attachments WHERE workspace_id = ?',
          [ws.workspaceId],
        )
      ).map((r) => r.owner_kind),
  };
}
