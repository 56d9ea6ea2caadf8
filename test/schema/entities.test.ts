/**
 * The entities match the migrated schema: one entity per table, property names
 * equal column names, explicit types and nullability as documented, and every
 * column of every table round-trips through a TypeORM repository with the
 * right JavaScript type (Date, boolean, number, bigint string) on this dialect.
 */
import type { DataSource, EntityMetadata, EntityTarget, ObjectLiteral } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALL_ENTITIES } from '../../entities/index';
import { EXPECTED_TABLES, type LogicalType } from './expected-schema';
import { DIALECT, fullRow, insertValid, openDataSource } from './helpers';

let ds: DataSource;

beforeAll(async () => {
  ds = await openDataSource();
});

afterAll(async () => {
  await ds?.destroy();
});

/** The portable entity column type each logical type maps to. */
function entityType(t: LogicalType): { type: string; length?: string } {
  if (typeof t === 'object') return { type: 'varchar', length: String(t.str) };
  return {
    uuid: { type: 'uuid' },
    hash: { type: 'char', length: '64' },
    ts: { type: 'timestamp' },
    doc: { type: 'text' },
    text: { type: 'text' },
    exact: { type: 'varchar', length: '255' },
    bool: { type: 'boolean' },
    int: { type: 'int' },
    bigint: { type: 'bigint' },
    serial: { type: 'bigint' },
  }[t];
}

function metadataOf(table: string): EntityMetadata {
  const found = ds.entityMetadatas.find((m) => m.tableName === table);
  if (!found) throw new Error(`no entity for ${table}`);
  return found;
}

describe(`entities (${DIALECT})`, () => {
  it('has exactly one entity per table', () => {
    expect(ALL_ENTITIES).toHaveLength(EXPECTED_TABLES.length);
    expect(ds.entityMetadatas.map((m) => m.tableName).sort()).toEqual(EXPECTED_TABLES.map((t) => t.name).sort());
  });

  describe.each(EXPECTED_TABLES.map((t) => [t.name, t] as const))('%s', (name, table) => {
    it('maps every column under its own name with the documented type and nullability', () => {
      const meta = metadataOf(name);
      const actual = meta.columns.map((c) => ({
        property: c.propertyName,
        column: c.databaseName,
        nullable: c.isNullable,
        type: c.type,
        length: c.length || undefined,
      }));
      const expected = table.columns.map((c) => ({
        property: c.name,
        column: c.name,
        nullable: c.nullable,
        ...entityType(c.type),
      }));
      expect(actual).toEqual(expected);
      expect(meta.primaryColumns.map((c) => c.databaseName)).toEqual(table.primaryKey);
    });

    it('round-trips every column through its repository', async () => {
      const row = fullRow(name);
      for (const col of table.columns) if (col.type === 'bool') row[col.name] = true;
      if (name === 'tasks') await insertValid(ds, 'workspaces', { id: row.workspace_id });
      if (name === 'task_creation_steps') await insertValid(ds, 'task_creation_operations', { id: row.operation_id });
      const repo = ds.getRepository(metadataOf(name).target as EntityTarget<ObjectLiteral>);
      await repo.insert(row);
      const key = name === 'event_outbox' ? { event_id: row.event_id } : undefined;
      const where = key ?? Object.fromEntries(table.primaryKey.map((c) => [c, row[c]]));
      const found = await repo.findOneByOrFail(where);
      for (const col of table.columns) {
        const value = found[col.name] as unknown;
        const label = `${name}.${col.name}`;
        if (col.type === 'serial') expect(value, label).toMatch(/^\d+$/);
        else if (col.type === 'ts') expect((value as Date).getTime(), label).toBe((row[col.name] as Date).getTime());
        else expect(value, label).toStrictEqual(row[col.name]);
      }
    });
  });
});
