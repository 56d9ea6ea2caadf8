/**
 * DDL helpers for the migration history: the column conventions of
 * docs/schema.md ("Column conventions") as one function per logical type, and a
 * small table builder that renders CREATE TABLE / CREATE INDEX statements with
 * named PK, UNIQUE, CHECK and FOREIGN KEY constraints for either dialect.
 *
 * Raw SQL rather than TypeORM's `Table` API: TypeORM's MySQL query runner
 * refuses CHECK constraints and cannot express per-column character sets and
 * collations precisely enough for the byte-exact columns.
 *
 * Migrations call `detectSqlDialect()` once, then build `TableSpec`s. Every
 * column is NOT NULL unless `nullable: true`. Defaults are raw SQL fragments.
 */
import type { QueryRunner } from 'typeorm';
import { sqlInList } from '../domain/vocab';

/** `mariadb` and `mysql` differ only in the name of the no-pad binary collation. */
export type SqlDialect = 'postgres' | 'mariadb' | 'mysql';

/** PostgreSQL, or MariaDB vs MySQL 8 told apart by `SELECT VERSION()`. */
export async function detectSqlDialect(queryRunner: QueryRunner): Promise<SqlDialect> {
  const type = queryRunner.connection.options.type;
  if (type === 'postgres') return 'postgres';
  if (type !== 'mysql' && type !== 'mariadb') throw new Error(`unsupported database type ${type}`);
  const rows = (await queryRunner.query('SELECT VERSION() AS v')) as { v: string }[];
  return /mariadb/i.test(rows[0]?.v ?? '') ? 'mariadb' : 'mysql';
}

/** Quotes an identifier (all of ours are lowercase snake_case). */
export function ident(d: SqlDialect, name: string): string {
  if (!/^[a-z][a-z0-9_]*$/.test(name)) throw new Error(`bad identifier ${name}`);
  return d === 'postgres' ? `"${name}"` : `\`${name}\``;
}

/** Byte-exact, case-sensitive, no-pad collation clause for text on this dialect. */
export function exactCollation(d: SqlDialect): string {
  if (d === 'postgres') return 'COLLATE "C"';
  return d === 'mariadb' ? 'COLLATE utf8mb4_nopad_bin' : 'COLLATE utf8mb4_0900_bin';
}

export interface ColumnOptions {
  nullable?: boolean;
  /** Raw SQL default expression, e.g. `'none'` (already quoted) or `0`. */
  default?: string;
}

/** One rendered column: its name and full definition (`"name" type NOT NULL DEFAULT ...`). */
export interface ColumnDef {
  name: string;
  sql: string;
}

function column(d: SqlDialect, name: string, type: string, opts: ColumnOptions = {}): ColumnDef {
  const parts = [ident(d, name), type, opts.nullable ? 'NULL' : 'NOT NULL'];
  if (opts.default !== undefined) parts.push(`DEFAULT ${opts.default}`);
  return { name, sql: parts.join(' ') };
}

const MYSQL_ASCII = 'CHARACTER SET ascii COLLATE ascii_bin';

/** `uuid`: native uuid on PostgreSQL, ASCII char(36) on MySQL. */
export function uuidColumn(name: string, d: SqlDialect, opts?: ColumnOptions): ColumnDef {
  return column(d, name, d === 'postgres' ? 'uuid' : `char(36) ${MYSQL_ASCII}`, opts);
}

/** `hash`: lowercase SHA-256 hex. */
export function hashColumn(name: string, d: SqlDialect, opts?: ColumnOptions): ColumnDef {
  return column(d, name, d === 'postgres' ? 'char(64)' : `char(64) ${MYSQL_ASCII}`, opts);
}

/** `ts`: UTC with milliseconds. */
export function tsColumn(name: string, d: SqlDialect, opts?: ColumnOptions): ColumnDef {
  return column(d, name, d === 'postgres' ? 'timestamptz(3)' : 'datetime(3)', opts);
}

/** SQL for "now" used as the default of created_at / updated_at. */
export function nowDefault(d: SqlDialect): string {
  return d === 'postgres' ? 'now()' : 'CURRENT_TIMESTAMP(3)';
}

/** `created_at ts NOT NULL` defaulting to the database clock (the application also sets it). */
export function createdAtColumn(d: SqlDialect): ColumnDef {
  return tsColumn('created_at', d, { default: nowDefault(d) });
}

/** `updated_at ts NOT NULL` defaulting to the database clock (the application also sets it). */
export function updatedAtColumn(d: SqlDialect): ColumnDef {
  return tsColumn('updated_at', d, { default: nowDefault(d) });
}

/** `doc`: canonical JSON stored as text, never parsed by SQL. */
export function docColumn(name: string, d: SqlDialect, opts?: ColumnOptions): ColumnDef {
  return column(d, name, d === 'postgres' ? 'text' : 'longtext', opts);
}

/** Free text (`text` on both dialects; MySQL's holds 64 KiB). */
export function textColumn(name: string, d: SqlDialect, opts?: ColumnOptions): ColumnDef {
  return column(d, name, 'text', opts);
}

/** `exact`: byte-exact, case-sensitive, no-pad varchar(255). */
export function exactColumn(name: string, d: SqlDialect, opts?: ColumnOptions): ColumnDef {
  const type =
    d === 'postgres' ? 'varchar(255) COLLATE "C"' : `varchar(255) CHARACTER SET utf8mb4 ${exactCollation(d)}`;
  return column(d, name, type, opts);
}

/** `str(n)`: varchar(n) in the database's default collation. */
export function strColumn(name: string, length: number, d: SqlDialect, opts?: ColumnOptions): ColumnDef {
  return column(d, name, `varchar(${length})`, opts);
}

/** `bool`: boolean on PostgreSQL, tinyint(1) (0/1) on MySQL. */
export function boolColumn(
  name: string,
  d: SqlDialect,
  opts: { default?: boolean; nullable?: boolean } = {},
): ColumnDef {
  const type = d === 'postgres' ? 'boolean' : 'tinyint(1)';
  let def: string | undefined;
  if (opts.default !== undefined) def = d === 'postgres' ? String(opts.default) : opts.default ? '1' : '0';
  return column(d, name, type, { nullable: opts.nullable, default: def });
}

export function intColumn(name: string, d: SqlDialect, opts: { default?: number; nullable?: boolean } = {}): ColumnDef {
  return column(d, name, 'int', { nullable: opts.nullable, default: opts.default?.toString() });
}

export function bigintColumn(name: string, d: SqlDialect, opts?: ColumnOptions): ColumnDef {
  return column(d, name, 'bigint', opts);
}

/** Auto-increment bigint (identity on PostgreSQL); make it the table's primary key. */
export function bigSerialColumn(name: string, d: SqlDialect): ColumnDef {
  const type = d === 'postgres' ? 'bigint GENERATED ALWAYS AS IDENTITY' : 'bigint AUTO_INCREMENT';
  return column(d, name, type);
}

export interface NamedColumns {
  name: string;
  columns: string[];
}

export interface CheckSpec {
  name: string;
  /** SQL boolean expression; build it with `ident()` so it suits the dialect. */
  expression: string;
}

export interface ForeignKeySpec extends NamedColumns {
  referencedTable: string;
  referencedColumns: string[];
}

export interface TableSpec {
  name: string;
  columns: ColumnDef[];
  primaryKey: string[];
  uniques?: NamedColumns[];
  checks?: CheckSpec[];
  indexes?: NamedColumns[];
  foreignKeys?: ForeignKeySpec[];
}

/**
 * A closed value set: CHECK `chk_<table>_<column>` with `column IN (vocab)`.
 * On MySQL the comparison runs under the no-pad binary collation, so that
 * `'planned '` (trailing space) or `'Planned'` is rejected as on PostgreSQL.
 * A NULL in a nullable column passes, as CHECK does on both dialects.
 */
export function inCheck(d: SqlDialect, table: string, col: string, values: readonly string[]): CheckSpec {
  const lhs = d === 'postgres' ? ident(d, col) : `${ident(d, col)} ${exactCollation(d)}`;
  return { name: `chk_${table}_${col}`, expression: `${lhs} IN (${sqlInList(values)})` };
}

/** Identifier limit: PostgreSQL 63, MySQL 64. */
const MAX_IDENT = 63;

function checkName(name: string): string {
  if (name.length > MAX_IDENT) throw new Error(`identifier ${name} is longer than ${MAX_IDENT}`);
  return name;
}

function list(d: SqlDialect, cols: string[]): string {
  return cols.map((c) => ident(d, c)).join(', ');
}

/** CREATE TABLE plus one CREATE INDEX per secondary index. */
export function createTableSql(d: SqlDialect, t: TableSpec): string[] {
  const names = new Set(t.columns.map((c) => c.name));
  const known = (cols: string[]) => {
    for (const c of cols) if (!names.has(c)) throw new Error(`${t.name}: unknown column ${c}`);
    return cols;
  };
  const lines = t.columns.map((c) => c.sql);
  lines.push(`CONSTRAINT ${ident(d, checkName(`pk_${t.name}`))} PRIMARY KEY (${list(d, known(t.primaryKey))})`);
  for (const u of t.uniques ?? []) {
    lines.push(`CONSTRAINT ${ident(d, checkName(u.name))} UNIQUE (${list(d, known(u.columns))})`);
  }
  for (const c of t.checks ?? []) {
    lines.push(`CONSTRAINT ${ident(d, checkName(c.name))} CHECK (${c.expression})`);
  }
  for (const f of t.foreignKeys ?? []) {
    lines.push(
      `CONSTRAINT ${ident(d, checkName(f.name))} FOREIGN KEY (${list(d, known(f.columns))}) ` +
        `REFERENCES ${ident(d, f.referencedTable)} (${list(d, f.referencedColumns)})`,
    );
  }
  const options = d === 'postgres' ? '' : ' ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin';
  const statements = [`CREATE TABLE ${ident(d, t.name)} (\n  ${lines.join(',\n  ')}\n)${options}`];
  for (const ix of t.indexes ?? []) {
    statements.push(
      `CREATE INDEX ${ident(d, checkName(ix.name))} ON ${ident(d, t.name)} (${list(d, known(ix.columns))})`,
    );
  }
  return statements;
}

/** Creates the tables in order (referenced tables first). */
export async function createTables(queryRunner: QueryRunner, d: SqlDialect, tables: TableSpec[]): Promise<void> {
  for (const t of tables) {
    for (const sql of createTableSql(d, t)) await queryRunner.query(sql);
  }
}

/** Drops the tables in reverse creation order (dependents first). */
export async function dropTables(queryRunner: QueryRunner, d: SqlDialect, tables: TableSpec[]): Promise<void> {
  for (const t of [...tables].reverse()) await queryRunner.query(`DROP TABLE ${ident(d, t.name)}`);
}
