/**
 * Operation-owned effect rows, named by (table, canonical key) and the hash
 * of the exact row the step wrote: what compensation undoes in its settling
 * transaction and what a cleanup job's proof lists. Never begins a
 * transaction.
 *
 * Contract:
 * - `OwnedRow{table, key, row_sha256, undone_sha256}`: `row_sha256` is the
 *   `rowHash()` of the row exactly as the step left it; `undone_sha256` is
 *   the hash of the row after the undo (null: the undo deletes the row).
 *   Only `task_message_attachments` can be restored (to its exact staged
 *   owner, a compensation's undo) instead of deleted: when its
 *   `undone_sha256` is set; a deleted task's attachments are deleted.
 * - `ownedRowLocks(rows)`: one FOR UPDATE LockNeed per row at its table's
 *   tier (sessions 9, runtimes 10, environment bindings 11.1, environment repos 11.2,
 *   group members and blockers 12.2, markers and attachments 14,
 *   remote-contribution associations 15).
 * - `readOwnedRowsLocked(tx, rows)` classifies each row under those locks:
 *   `ours` (hash equals `row_sha256`), `undone` (absent, or equal to
 *   `undone_sha256`), `foreign` (anything else).
 * - `undoOwnedRowsLocked(tx, found)` deletes/restores exactly the `ours`
 *   rows (by their key, under the FOR UPDATE lock, after their hash matched
 *   the row the step wrote), re-reads them and returns them as they are
 *   afterwards (for a proof). Callers undo only when no row is `foreign`
 *   (all or nothing).
 */
import { TIER, type Tier } from '../../db/lock-plan';
import type { SqlParam, Tx } from '../../db/tx';
import type { ObservedRow } from './recording';
import {
  readAttachment,
  readBlocker,
  readEnvironmentBinding,
  readEnvironmentRepo,
  readGroupMember,
  readMarker,
  readRuntime,
  readSession,
  rowHash,
} from './row-documents';
import { associationDoc } from '../../kinds/remote-contribution-associate/rows';
import { txReader, type LockNeed, type Reader } from './row-locks';

export interface OwnedRow {
  table: string;
  key: string;
  row_sha256: string;
  undone_sha256: string | null;
}

interface TableSpec {
  tier: Tier;
  /** WHERE clause and parameters selecting the row from its canonical key. */
  where(key: string): { sql: string; params: SqlParam[] };
  read(read: Reader, key: string): Promise<unknown>;
  /** Restore instead of delete (attachments go back to their staged owner) when the row's `undone_sha256` is set. */
  restore?: string;
}

function pair(key: string): [string, string] {
  const i = key.indexOf(':');
  if (i < 0) throw new Error(`owned row key ${key} is not a pair`);
  return [key.slice(0, i), key.slice(i + 1)];
}

/** `provider:connection:kind:contribution-id` (the contribution ID may itself contain ':'). */
function associationParts(key: string): string[] {
  const parts = key.split(':');
  if (parts.length < 4) throw new Error(`association key ${key} is not provider:connection:kind:id`);
  return [parts[0]!, parts[1]!, parts[2]!, parts.slice(3).join(':')];
}

const ASSOCIATION_WHERE = 'provider = ? AND connection_id = ? AND contribution_kind = ? AND contribution_id = ?';

const TABLES: Readonly<Record<string, TableSpec>> = {
  task_sessions: {
    tier: TIER.SESSION,
    where: (k) => ({ sql: 'id = ?', params: [k] }),
    read: (r, k) => readSession(r, k),
  },
  executors_running: {
    tier: TIER.RUNTIME,
    where: (k) => ({ sql: 'id = ?', params: [k] }),
    read: (r, k) => readRuntime(r, k),
  },
  task_environment_bindings: {
    tier: TIER.ENVIRONMENT,
    where: (k) => ({ sql: 'task_id = ?', params: [k] }),
    read: (r, k) => readEnvironmentBinding(r, k),
  },
  task_environment_repos: {
    tier: TIER.ENVIRONMENT_REPO,
    where: (k) => ({ sql: 'id = ?', params: [k] }),
    read: (r, k) => readEnvironmentRepo(r, k),
  },
  task_blockers: {
    tier: TIER.GROUP_MEMBER,
    where: (k) => ({ sql: 'task_id = ? AND blocker_task_id = ?', params: pair(k) }),
    read: (r, k) => readBlocker(r, ...pair(k)),
  },
  workspace_group_members: {
    tier: TIER.GROUP_MEMBER,
    where: (k) => ({ sql: 'group_id = ? AND task_id = ?', params: pair(k) }),
    read: (r, k) => readGroupMember(r, ...pair(k)),
  },
  task_resource_markers: {
    tier: TIER.MARKER,
    where: (k) => ({ sql: 'resource_key = ?', params: [k] }),
    read: (r, k) => readMarker(r, k),
  },
  task_message_attachments: {
    tier: TIER.MARKER,
    where: (k) => ({ sql: 'id = ?', params: [k] }),
    read: (r, k) => readAttachment(r, k),
    restore: "owner_kind = 'staging', task_id = NULL, claimed_by_operation_id = NULL, claimed_by_step_id = NULL",
  },
  task_remote_contribution_associations: {
    tier: TIER.CONFIG,
    where: (k) => ({ sql: ASSOCIATION_WHERE, params: associationParts(k) }),
    read: async (r, k) => {
      const rows = await r(
        `SELECT id, provider, connection_id, contribution_kind, contribution_id, task_id, workspace_id, repository_id,
                operation_id, step_id, idempotency_key, ownership_marker, provider_handle, claimed_at
           FROM task_remote_contribution_associations WHERE ${ASSOCIATION_WHERE}`,
        associationParts(k),
      );
      return rows[0] ? associationDoc(rows[0]) : null;
    },
  },
};

export const OWNED_ROW_TABLES: readonly string[] = Object.keys(TABLES);

function specOf(table: string): TableSpec {
  const spec = TABLES[table];
  if (!spec) throw new Error(`no owned-row support for table ${table}`);
  return spec;
}

export function ownedRowLocks(rows: readonly OwnedRow[]): LockNeed[] {
  return rows.map((r) => {
    const spec = specOf(r.table);
    const w = spec.where(r.key);
    return { tier: spec.tier, table: r.table, key: r.key, where: w.sql, params: w.params, mode: 'update' };
  });
}

export type OwnedPresence = 'ours' | 'undone' | 'foreign';

export interface FoundOwnedRow {
  row: OwnedRow;
  presence: OwnedPresence;
  /** Hash of the row as found (null: absent). */
  found_sha256: string | null;
}

/** The current hash of one row (null: absent), through any reader. */
export async function currentRowHash(read: Reader, table: string, key: string): Promise<string | null> {
  const doc = await specOf(table).read(read, key);
  return doc === null ? null : rowHash(doc);
}

export async function readOwnedRows(read: Reader, rows: readonly OwnedRow[]): Promise<FoundOwnedRow[]> {
  const out: FoundOwnedRow[] = [];
  for (const row of rows) {
    const found = await currentRowHash(read, row.table, row.key);
    const presence: OwnedPresence =
      found === row.row_sha256
        ? 'ours'
        : found === row.undone_sha256 || (found === null && row.undone_sha256 === null)
          ? 'undone'
          : 'foreign';
    out.push({ row, presence, found_sha256: found });
  }
  return out;
}

export function readOwnedRowsLocked(tx: Tx, rows: readonly OwnedRow[]): Promise<FoundOwnedRow[]> {
  return readOwnedRows(txReader(tx), rows);
}

export function observedOf(found: readonly FoundOwnedRow[]): ObservedRow[] {
  return found.map((f) => ({ table: f.row.table, key: f.row.key, row_sha256: f.found_sha256 }));
}

export async function undoOwnedRowsLocked(tx: Tx, found: readonly FoundOwnedRow[]): Promise<ObservedRow[]> {
  for (const f of found) {
    if (f.presence !== 'ours') continue;
    const spec = specOf(f.row.table);
    const w = spec.where(f.row.key);
    const changed =
      spec.restore && f.row.undone_sha256 !== null
        ? await tx.exec(`UPDATE ${f.row.table} SET ${spec.restore}, updated_at = ${tx.now} WHERE ${w.sql}`, w.params)
        : await tx.exec(`DELETE FROM ${f.row.table} WHERE ${w.sql}`, w.params);
    if (changed !== 1) throw new Error(`owned row ${f.row.table} ${f.row.key} did not change exactly once`);
  }
  const after = await readOwnedRowsLocked(
    tx,
    found.map((f) => f.row),
  );
  const bad = after.find((a) => a.presence !== 'undone');
  if (bad) throw new Error(`owned row ${bad.row.table} ${bad.row.key} is not undone after the undo`);
  return observedOf(after);
}
