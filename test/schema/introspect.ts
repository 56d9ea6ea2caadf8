/**
 * Reads the migrated schema back from the catalogs of either dialect into one
 * normalized shape (columns with physical types; PK, UNIQUE, FK, CHECK names
 * and plain indexes per table), for comparison with expected-schema.ts.
 */
import type { DataSource } from 'typeorm';
import { DIALECT } from './helpers';

export interface ActualColumn {
  table: string;
  name: string;
  /** format_type() on PostgreSQL; column_type (display widths of int/bigint dropped) on MySQL. */
  type: string;
  nullable: boolean;
  /** PostgreSQL collation name (`default`, `C`) or MySQL `charset/collation`; null when not a string. */
  collation: string | null;
  /** PostgreSQL identity (`a`: always) or MySQL `auto_increment`; '' otherwise. */
  generated: string;
}

export interface ActualKeys {
  pk: string[];
  uniques: Record<string, string[]>;
  indexes: Record<string, string[]>;
  foreignKeys: Record<string, { columns: string[]; table: string }>;
  checks: string[];
}

export const MIGRATIONS_TABLE = 'taskledger_migrations';

export async function readTables(ds: DataSource): Promise<string[]> {
  const sql =
    DIALECT === 'postgres'
      ? `SELECT tablename AS t FROM pg_tables WHERE schemaname = current_schema()`
      : `SELECT table_name AS t FROM information_schema.tables WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'`;
  return ((await ds.query(sql)) as { t: string }[]).map((r) => r.t).sort();
}

export async function readColumns(ds: DataSource): Promise<ActualColumn[]> {
  if (DIALECT === 'postgres') {
    const rows = (await ds.query(`
      SELECT c.relname AS t, a.attname AS c, format_type(a.atttypid, a.atttypmod) AS type,
             NOT a.attnotnull AS nullable, coll.collname AS collation, a.attidentity AS generated
      FROM pg_attribute a
      JOIN pg_class c ON c.oid = a.attrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_collation coll ON coll.oid = a.attcollation
      WHERE n.nspname = current_schema() AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
      ORDER BY c.relname, a.attnum`)) as {
      t: string;
      c: string;
      type: string;
      nullable: boolean;
      collation: string | null;
      generated: string;
    }[];
    return rows.map((r) => ({
      table: r.t,
      name: r.c,
      type: r.type,
      nullable: r.nullable,
      collation: r.collation,
      generated: r.generated,
    }));
  }
  const rows = (await ds.query(`
    SELECT table_name AS t, column_name AS c, column_type AS type, is_nullable AS nullable,
           character_set_name AS cs, collation_name AS coll, extra AS extra
    FROM information_schema.columns WHERE table_schema = DATABASE()
    ORDER BY table_name, ordinal_position`)) as {
    t: string;
    c: string;
    type: string;
    nullable: string;
    cs: string | null;
    coll: string | null;
    extra: string;
  }[];
  return rows.map((r) => ({
    table: r.t,
    name: r.c,
    type: r.type.replace(/^(int|bigint)\(\d+\)/, '$1'),
    nullable: r.nullable === 'YES',
    collation: r.cs ? `${r.cs}/${r.coll}` : null,
    generated: /auto_increment/i.test(r.extra) ? 'auto_increment' : '',
  }));
}

function keysOf(map: Map<string, ActualKeys>, table: string): ActualKeys {
  let k = map.get(table);
  if (!k) {
    k = { pk: [], uniques: {}, indexes: {}, foreignKeys: {}, checks: [] };
    map.set(table, k);
  }
  return k;
}

export async function readKeys(ds: DataSource): Promise<Map<string, ActualKeys>> {
  const map = new Map<string, ActualKeys>();
  if (DIALECT === 'postgres') {
    const cons = (await ds.query(`
      SELECT cl.relname AS t, c.conname AS name, c.contype AS type, fcl.relname AS ref,
             array(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY k(n, o)
                   JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.o) AS cols
      FROM pg_constraint c
      JOIN pg_class cl ON cl.oid = c.conrelid
      JOIN pg_namespace ns ON ns.oid = cl.relnamespace
      LEFT JOIN pg_class fcl ON fcl.oid = c.confrelid
      WHERE ns.nspname = current_schema()`)) as {
      t: string;
      name: string;
      type: string;
      ref: string;
      cols: string[];
    }[];
    for (const c of cons) {
      const k = keysOf(map, c.t);
      if (c.type === 'p') k.pk = c.cols;
      else if (c.type === 'u') k.uniques[c.name] = c.cols;
      else if (c.type === 'f') k.foreignKeys[c.name] = { columns: c.cols, table: c.ref };
      else if (c.type === 'c') k.checks.push(c.name);
    }
    const ixs = (await ds.query(`
      SELECT t.relname AS t, i.relname AS name,
             array(SELECT a.attname::text FROM unnest(ix.indkey::int2[]) WITH ORDINALITY k(n, o)
                   JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.n ORDER BY k.o) AS cols
      FROM pg_index ix
      JOIN pg_class i ON i.oid = ix.indexrelid
      JOIN pg_class t ON t.oid = ix.indrelid
      JOIN pg_namespace ns ON ns.oid = t.relnamespace
      WHERE ns.nspname = current_schema()
        AND NOT EXISTS (SELECT 1 FROM pg_constraint c
                        WHERE c.conindid = ix.indexrelid AND c.contype IN ('p', 'u', 'x'))`)) as {
      t: string;
      name: string;
      cols: string[];
    }[];
    for (const ix of ixs) keysOf(map, ix.t).indexes[ix.name] = ix.cols;
  } else {
    const cons = (await ds.query(`
      SELECT table_name AS t, constraint_name AS name, constraint_type AS type
      FROM information_schema.table_constraints WHERE constraint_schema = DATABASE()`)) as {
      t: string;
      name: string;
      type: string;
    }[];
    const cols = (await ds.query(`
      SELECT table_name AS t, constraint_name AS name, column_name AS c, referenced_table_name AS ref
      FROM information_schema.key_column_usage WHERE constraint_schema = DATABASE()
      ORDER BY table_name, constraint_name, ordinal_position`)) as {
      t: string;
      name: string;
      c: string;
      ref: string;
    }[];
    const colsOf = (t: string, name: string) => cols.filter((r) => r.t === t && r.name === name);
    for (const c of cons) {
      const k = keysOf(map, c.t);
      const kc = colsOf(c.t, c.name);
      if (c.type === 'PRIMARY KEY') k.pk = kc.map((r) => r.c);
      else if (c.type === 'UNIQUE') k.uniques[c.name] = kc.map((r) => r.c);
      else if (c.type === 'FOREIGN KEY') k.foreignKeys[c.name] = { columns: kc.map((r) => r.c), table: kc[0]!.ref };
      else if (c.type === 'CHECK') k.checks.push(c.name);
    }
    const stats = (await ds.query(`
      SELECT table_name AS t, index_name AS name, column_name AS c
      FROM information_schema.statistics WHERE table_schema = DATABASE()
      ORDER BY table_name, index_name, seq_in_index`)) as { t: string; name: string; c: string }[];
    for (const s of stats) {
      const k = keysOf(map, s.t);
      if (s.name === 'PRIMARY' || s.name in k.uniques) continue;
      (k.indexes[s.name] ??= []).push(s.c);
    }
  }
  for (const k of map.values()) k.checks.sort();
  return map;
}
