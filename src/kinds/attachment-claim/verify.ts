/**
 * `taskledger verify`'s look at attachment files (with observation only: it
 * needs TASKLEDGER_DATA_DIR). Plain reads, then file-system reads; no lock,
 * no write. Code `attachment_file`:
 * - an aborted creation with an `attachment_claim` step whose task's
 *   attachment directory (`<dataDir>/attachments/<task>/`) still holds files,
 *   while no cleanup job of that claim is still open (an open one owns them);
 * - an `attachment_copies` ownership marker whose creation has ended (the
 *   step never recorded after it: its copies may be on disk with no owner);
 * - a staged upload whose file is missing (the create requests that name it
 *   will fail `staged_file_missing`).
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { readRows, type Db } from '../../db/tx';
import type { Drift } from '../../verify/drift';

async function entries(dir: string): Promise<string[]> {
  try {
    return await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
}

export async function checkAttachmentFiles(
  deps: { db: Db; dataDir: string },
  options: { workspaceId?: string; limit: number },
): Promise<Drift[]> {
  const out: Drift[] = [];
  const scope = (column: string) => (options.workspaceId ? ` AND ${column} = ?` : '');
  const params = options.workspaceId ? [options.workspaceId] : [];
  const limit = Math.max(1, Math.trunc(options.limit));
  const aborted = await readRows<{ id: string; task_id: string }>(
    deps.db,
    `SELECT o.id, o.task_id FROM task_creation_operations o
      WHERE o.state = 'aborted' ${scope('o.workspace_id')}
        AND EXISTS (SELECT 1 FROM task_creation_steps s WHERE s.operation_id = o.id AND s.kind = 'attachment_claim')
        AND NOT EXISTS (SELECT 1 FROM task_resource_cleanup_jobs j
                         WHERE j.operation_id = o.id AND j.kind = 'attachment_claim' AND j.state <> 'done')
      ORDER BY o.id LIMIT ${limit}`,
    params,
  );
  for (const op of aborted) {
    const left = await entries(join(deps.dataDir, 'attachments', op.task_id));
    if (left.length === 0) continue;
    out.push({
      code: 'attachment_file',
      operation_id: op.id,
      task_id: op.task_id,
      subject: `attachments/${op.task_id}`,
      message: `the creation aborted but ${left.length} file(s) of its attachment claim are still on disk`,
    });
  }
  const markers = await readRows<{ resource_key: string; operation_id: string; task_id: string; state: string }>(
    deps.db,
    `SELECT m.resource_key, m.operation_id, m.task_id, o.state FROM task_resource_markers m
       JOIN task_creation_operations o ON o.id = m.operation_id
      WHERE m.kind = 'attachment_copies' AND o.state IN ('completed', 'aborted') ${scope('m.workspace_id')}
      ORDER BY m.resource_key LIMIT ${limit}`,
    params,
  );
  for (const m of markers) {
    out.push({
      code: 'attachment_file',
      operation_id: m.operation_id,
      task_id: m.task_id,
      subject: `marker ${m.resource_key}`,
      message: `the creation is ${m.state} but its attachment claim's marker is still there (copies may be left)`,
    });
  }
  const staged = await readRows<{ id: string; storage_path: string }>(
    deps.db,
    `SELECT id, storage_path FROM task_message_attachments WHERE owner_kind = 'staging' ${scope('workspace_id')}
      ORDER BY id LIMIT ${limit}`,
    params,
  );
  for (const a of staged) {
    if (await exists(a.storage_path)) continue;
    out.push({
      code: 'attachment_file',
      operation_id: '',
      task_id: '',
      subject: `staged attachment ${a.id}`,
      message: `its file ${a.storage_path} is missing`,
    });
  }
  return out;
}
