/**
 * The migrated test database has exactly the tables, columns (physical types,
 * nullability, collations), keys, indexes and CHECK names of docs/schema.md,
 * read back from the catalogs of this project's dialect.
 */
import type { DataSource } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXPECTED_TABLES, type LogicalType, expectedCheckNames } from './expected-schema';
import { DIALECT, flavorOf, openDataSource } from './helpers';
import { type ActualColumn, type ActualKeys, MIGRATIONS_TABLE, readColumns, readKeys, readTables } from './introspect';

type Physical = Pick<ActualColumn, 'type' | 'collation' | 'generated'>;

/** The column conventions table of docs/schema.md, as the catalogs report it. */
function physical(t: LogicalType, flavor: 'postgres' | 'mariadb' | 'mysql'): Physical {
  if (flavor === 'postgres') {
    const pg = (type: string, collation: string | null = null, generated = ''): Physical => ({
      type,
      collation,
      generated,
    });
    if (typeof t === 'object') return pg(`character varying(${t.str})`, 'default');
    return {
      uuid: pg('uuid'),
      hash: pg('character(64)', 'default'),
      ts: pg('timestamp(3) with time zone'),
      doc: pg('text', 'default'),
      text: pg('text', 'default'),
      exact: pg('character varying(255)', 'C'),
      bool: pg('boolean'),
      int: pg('integer'),
      bigint: pg('bigint'),
      serial: pg('bigint', null, 'a'),
    }[t];
  }
  const my = (type: string, collation: string | null = null, generated = ''): Physical => ({
    type,
    collation,
    generated,
  });
  const bin = 'utf8mb4/utf8mb4_bin';
  if (typeof t === 'object') return my(`varchar(${t.str})`, bin);
  return {
    uuid: my('char(36)', 'ascii/ascii_bin'),
    hash: my('char(64)', 'ascii/ascii_bin'),
    ts: my('datetime(3)'),
    doc: my('longtext', bin),
    text: my('text', bin),
    exact: my('varchar(255)', flavor === 'mariadb' ? 'utf8mb4/utf8mb4_nopad_bin' : 'utf8mb4/utf8mb4_0900_bin'),
    bool: my('tinyint(1)'),
    int: my('int'),
    bigint: my('bigint'),
    serial: my('bigint', null, 'auto_increment'),
  }[t];
}

let ds: DataSource;
let columns: ActualColumn[];
let keys: Map<string, ActualKeys>;
let flavor: 'postgres' | 'mariadb' | 'mysql';

beforeAll(async () => {
  ds = await openDataSource();
  flavor = await flavorOf(ds);
  columns = await readColumns(ds);
  keys = await readKeys(ds);
});

afterAll(async () => {
  await ds?.destroy();
});

describe(`schema tables (${DIALECT})`, () => {
  it('has exactly the tables of docs/schema.md plus the migrations table', async () => {
    const expected = [...EXPECTED_TABLES.map((t) => t.name), MIGRATIONS_TABLE].sort();
    expect(await readTables(ds)).toEqual(expected);
    expect(EXPECTED_TABLES).toHaveLength(31);
  });

  describe.each(EXPECTED_TABLES.map((t) => [t.name, t] as const))('%s', (name, table) => {
    it('has the documented columns in order, with nullability and dialect types', () => {
      const actual = columns.filter((c) => c.table === name);
      expect(actual.map((c) => c.name)).toEqual(table.columns.map((c) => c.name));
      for (const col of table.columns) {
        const a = actual.find((c) => c.name === col.name)!;
        expect({ column: col.name, nullable: a.nullable }).toEqual({ column: col.name, nullable: col.nullable });
        expect({ column: col.name, type: a.type, collation: a.collation, generated: a.generated }).toEqual({
          column: col.name,
          ...physical(col.type, flavor),
        });
      }
    });

    it('has the documented primary key, unique constraints, indexes and foreign keys', () => {
      const k = keys.get(name);
      expect(k).toBeDefined();
      expect(k!.pk).toEqual(table.primaryKey);
      expect(k!.uniques).toEqual(table.uniques);
      expect(k!.indexes).toEqual(table.indexes);
      expect(k!.foreignKeys).toEqual(table.foreignKeys);
    });

    it('has one named CHECK per closed value set plus the documented extra CHECKs', () => {
      expect(keys.get(name)?.checks ?? []).toEqual(expectedCheckNames(table));
    });
  });
});
