/**
 * Migration 15 of the ledger schema (after WorkflowWorkspaceIndexes1796170740000),
 * PostgreSQL only: every closed value set — the CHECK `chk_<table>_<column>`
 * that holds one column to its vocabulary (`column IN (...)`, inCheck in
 * src/db/migration-columns.ts) — becomes a domain of the column's type,
 * `closed_<table>_<column>`, carrying the same CHECK under the same name, and
 * the column takes that domain (ADR 0054). What a column accepts and the
 * name a refusal reports do not change.
 *
 * Why: PostgreSQL rebuilds a table's CHECK expressions from their stored text
 * at every INSERT and UPDATE, for every CHECK of the table, whichever columns
 * the statement sets (`ExecConstraints`: `stringToNode` and expression setup
 * per execution), and the vocabulary lists are the largest of them. A domain's
 * CHECK is checked only where a statement assigns the column.
 * `scripts/statement-cost.mjs pg-checks` measured one `task_creation_steps`
 * UPDATE at 246 µs of the backend's CPU with the table's CHECKs, 209 µs with
 * its closed sets as domains (179 µs with no CHECK at all).
 *
 * The closed sets are read from the catalog: a CHECK over exactly one text
 * column, named `chk_<table>_<column>` (so a range CHECK such as
 * `chk_workflow_steps_wip_limit`, over an integer, and the checks over two
 * columns stay table CHECKs). Each domain's CHECK is the table CHECK's own
 * definition with the column read as VALUE. MySQL and MariaDB have no
 * domains and keep their table CHECKs. down() puts the table CHECKs back and
 * drops the domains.
 */
import type { MigrationInterface, QueryRunner } from 'typeorm';
import { detectSqlDialect, ident } from '../src/db/migration-columns';

interface ClosedSet {
  table: string;
  column: string;
  name: string;
  /** `CHECK (...)` as pg_get_constraintdef gives it. */
  definition: string;
  /** The column's type as `format_type` gives it (`character varying(16)`). */
  type: string;
}

/** A domain's name: the table and column it serves (identifiers stay within PostgreSQL's 63 characters). */
const domainOf = (table: string, column: string) => {
  const name = `closed_${table}_${column}`;
  if (name.length > 63) throw new Error(`domain name ${name} is longer than 63 characters`);
  return name;
};

/** `definition` with every `(<from>)` — the checked column, or the domain's VALUE — read as `(<to>)`. */
function readAs(definition: string, from: string, to: string): string {
  return definition.split(`(${from})`).join(`(${to})`);
}

async function tableClosedSets(queryRunner: QueryRunner): Promise<ClosedSet[]> {
  return (await queryRunner.query(`
    SELECT c.relname AS "table", a.attname AS "column", k.conname AS name,
           pg_get_constraintdef(k.oid) AS definition, format_type(a.atttypid, a.atttypmod) AS type
      FROM pg_constraint k
      JOIN pg_class c ON c.oid = k.conrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
      JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.conkey[1]
     WHERE n.nspname = current_schema() AND k.contype = 'c' AND cardinality(k.conkey) = 1
       AND k.conname = 'chk_' || c.relname || '_' || a.attname
       AND a.atttypid = 'character varying'::regtype
     ORDER BY c.relname, a.attname`)) as ClosedSet[];
}

async function domainClosedSets(queryRunner: QueryRunner): Promise<(ClosedSet & { domain: string })[]> {
  return (await queryRunner.query(`
    SELECT t.typname AS domain, c.relname AS "table", a.attname AS "column", k.conname AS name,
           pg_get_constraintdef(k.oid) AS definition, format_type(t.typbasetype, t.typtypmod) AS type
      FROM pg_type t
      JOIN pg_namespace n ON n.oid = t.typnamespace
      JOIN pg_constraint k ON k.contypid = t.oid
      JOIN pg_attribute a ON a.atttypid = t.oid AND a.attnum > 0 AND NOT a.attisdropped
      JOIN pg_class c ON c.oid = a.attrelid AND c.relkind = 'r'
     WHERE n.nspname = current_schema() AND t.typtype = 'd' AND t.typname LIKE 'closed\\_%'
     ORDER BY c.relname, a.attname`)) as (ClosedSet & { domain: string })[];
}

export class ClosedSetDomains1796170800000 implements MigrationInterface {
  name = 'ClosedSetDomains1796170800000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    if (d !== 'postgres') return;
    for (const s of await tableClosedSets(queryRunner)) {
      const domain = ident(d, domainOf(s.table, s.column));
      await queryRunner.query(
        `CREATE DOMAIN ${domain} AS ${s.type} CONSTRAINT ${ident(d, s.name)} ${readAs(s.definition, s.column, 'VALUE')}`,
      );
      await queryRunner.query(
        `ALTER TABLE ${ident(d, s.table)} DROP CONSTRAINT ${ident(d, s.name)}, ALTER COLUMN ${ident(d, s.column)} TYPE ${domain}`,
      );
    }
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    if (d !== 'postgres') return;
    for (const s of await domainClosedSets(queryRunner)) {
      await queryRunner.query(
        `ALTER TABLE ${ident(d, s.table)} ALTER COLUMN ${ident(d, s.column)} TYPE ${s.type}, ` +
          `ADD CONSTRAINT ${ident(d, s.name)} ${readAs(s.definition, 'VALUE', s.column)}`,
      );
      await queryRunner.query(`DROP DOMAIN ${ident(d, s.domain)}`);
    }
  }
}
