import type postgres from 'postgres';
import { asc, getTableColumns, getTableName, gt, is, Table } from 'drizzle-orm';
import { getTableConfig as sqliteConfig, type SQLiteColumn, type SQLiteTable } from 'drizzle-orm/sqlite-core';
import { getTableConfig as pgConfig, type PgTable } from 'drizzle-orm/pg-core';
import * as sqliteSchema from './schema';
import * as pgSchema from './schema-pg';
import type { DbHandle } from './client';
import type { PgHandle } from './pg/client';

/** One table as both schemas define it (same export name, same columns: see schema-pg/parity.check.ts). */
interface TablePair {
  name: string;
  sqlite: SQLiteTable;
  pg: PgTable;
  /** The single-column primary key, used to page through the source in a stable order. */
  key: SQLiteColumn;
  /** The row property (TS name) of that key. */
  keyProp: string;
  columnCount: number;
  /** The PostgreSQL identity column whose sequence must move past the copied ids, if any. */
  identity?: string;
}

export interface CopyOptions {
  /** Replace a non-empty target (its tables are emptied in the same transaction) instead of refusing. */
  force?: boolean;
  /** Most rows per INSERT; further capped so one statement stays under PostgreSQL's 65535 parameters. */
  batchRows?: number;
}

export class CopyError extends Error {}

/**
 * Every table, parents before children (foreign keys), so inserts never point at a missing row.
 * Derived from the schemas, so a new table is copied without touching this file. SQLite-only tables (attempt
 * windows, which PostgreSQL mode keeps in Redis) are not copied.
 */
export function copyOrder(): TablePair[] {
  const pairs = new Map<string, TablePair>();
  for (const [name, table] of Object.entries(sqliteSchema)) {
    if (!is(table, Table) || (sqliteSchema.sqliteOnlyTables as readonly string[]).includes(name)) continue;
    const pg = (pgSchema as Record<string, unknown>)[name];
    if (!is(pg, Table)) throw new CopyError(`table ${name} has no PostgreSQL twin`);
    const cfg = sqliteConfig(table as SQLiteTable);
    const key = cfg.columns.filter((c) => c.primary);
    if (key.length !== 1) throw new CopyError(`table ${cfg.name} needs a single-column primary key to be copied`);
    const identity = pgConfig(pg as PgTable).columns.find((c) => c.generatedIdentity)?.name;
    const keyProp = Object.entries(getTableColumns(table as SQLiteTable)).find(([, c]) => c === key[0])![0];
    pairs.set(cfg.name, {
      name: cfg.name, sqlite: table as SQLiteTable, pg: pg as PgTable, key: key[0]!, keyProp, columnCount: cfg.columns.length, identity,
    });
  }
  const ordered: TablePair[] = [];
  const placed = new Set<string>();
  const visit = (pair: TablePair, path: string[]) => {
    if (placed.has(pair.name)) return;
    if (path.includes(pair.name)) throw new CopyError(`foreign-key cycle: ${[...path, pair.name].join(' → ')}`);
    for (const fk of sqliteConfig(pair.sqlite).foreignKeys) {
      const parent = getTableName(fk.reference().foreignTable);
      if (parent !== pair.name) visit(pairs.get(parent)!, [...path, pair.name]);
    }
    placed.add(pair.name);
    ordered.push(pair);
  };
  for (const name of [...pairs.keys()].sort()) visit(pairs.get(name)!, []);
  return ordered;
}

/** sqlite_sequence: the highest id AUTOINCREMENT gave per table, deleted rows' included (absent before any insert). */
function highestIdsGiven(src: DbHandle): Map<string, number> {
  const exists = src.sqlite.query(`select 1 from sqlite_master where type = 'table' and name = 'sqlite_sequence'`).get();
  if (!exists) return new Map();
  const rows = src.sqlite.query('select name, seq from sqlite_sequence').all() as { name: string; seq: number }[];
  return new Map(rows.map((r) => [r.name, Number(r.seq)]));
}

/**
 * Copies every row of a SQLite database into PostgreSQL, ids kept, in one PostgreSQL transaction:
 * the target ends up with all rows or none. Returns the row count per table, in copy order.
 * The source is read inside one SQLite read transaction, a consistent snapshot even while a gateway
 * keeps writing to it. Identity sequences are then set past the largest copied id so new rows get
 * fresh ids.
 */
export async function copySqliteToPostgres(src: DbHandle, dst: PgHandle, opts: CopyOptions = {}): Promise<Record<string, number>> {
  const tables = copyOrder();
  const counts: Record<string, number> = {};
  src.sqlite.exec('BEGIN');
  try {
    await dst.sql.begin(async (tx) => {
      const nonEmpty: string[] = [];
      for (const t of tables) if ((await tx`select 1 from ${tx(t.name)} limit 1`).length) nonEmpty.push(t.name);
      if (nonEmpty.length && !opts.force) {
        throw new CopyError(`target schema "${dst.schema}" is not empty (${nonEmpty.join(', ')}); pass --force to replace its contents`);
      }
      if (nonEmpty.length) await tx.unsafe(`truncate ${tables.map((t) => `"${t.name}"`).join(', ')} restart identity cascade`);
      for (const t of tables) counts[t.name] = await copyTable(src, tx, t, opts.batchRows ?? 1000);
      const given = highestIdsGiven(src);
      for (const t of tables) {
        if (!t.identity) continue;
        // Past the highest id SQLite ever gave, not only the highest left: AUTOINCREMENT never gives a deleted row's
        // id again, and ids are identities (a deleted key's usage rows and budget name it). is_called=false: the
        // next nextval() returns exactly that + 1 (or 1 on an empty table).
        await tx.unsafe(
          `select setval(pg_get_serial_sequence('"${t.name}"', '${t.identity}'), greatest(coalesce(max("${t.identity}"), 0), $1) + 1, false) from "${t.name}"`,
          [given.get(t.name) ?? 0],
        );
      }
    });
  } finally {
    src.sqlite.exec('COMMIT');
  }
  return counts;
}

/**
 * Pages through the source by primary key (no OFFSET scans) and inserts each page as one statement.
 * Rows are read through drizzle (booleans and JSON decoded), then encoded by the PostgreSQL
 * columns' own mappers and sent through postgres.js's multi-row insert: drizzle's query builder
 * spends ~0.25 s building one 1000-row insert, ten times the cost of running it.
 */
async function copyTable(src: DbHandle, tx: postgres.TransactionSql, t: TablePair, batchRows: number): Promise<number> {
  const limit = Math.max(1, Math.min(batchRows, Math.floor(60_000 / t.columnCount)));
  const columns = Object.entries(getTableColumns(t.pg));
  const exact = beyondDouble(src, t);
  let copied = 0;
  let after: unknown;
  for (;;) {
    const q = src.db.select().from(t.sqlite);
    const rows = (after === undefined ? q : q.where(gt(t.key, after))).orderBy(asc(t.key)).limit(limit).all() as Record<string, unknown>[];
    if (rows.length === 0) return copied;
    const wide = exact && exact.read(after, limit);
    const encoded = rows.map((row, i) => {
      const out: Record<string, unknown> = {};
      // Columns the source lacks are left out, so the target's defaults apply.
      for (const [prop, col] of columns) if (prop in row) out[col.name] = row[prop] == null ? null : col.mapToDriverValue(row[prop]);
      // A value a JS number would round goes as its exact decimal text (PostgreSQL parses it into the bigint).
      if (wide) for (const [name, v] of Object.entries(wide[i]!)) if (typeof v === 'bigint' && !Number.isSafeInteger(Number(v))) out[name] = v.toString();
      return out;
    });
    try {
      await tx`insert into ${tx(t.name)} ${tx(encoded as Record<string, postgres.ParameterOrJSON<never>>[])}`;
    } catch (err) {
      throw new CopyError(`copying ${t.name} failed: ${(err as Error).message}`);
    }
    copied += rows.length;
    after = rows[rows.length - 1]![t.keyProp];
    if (rows.length < limit) return copied;
  }
}

/**
 * For a table holding an integer beyond ±(2^53 − 1) (a money column edited by hand: the gateway itself never writes
 * one), a reader of its integer columns as bigints, page by page in the same order as the copy's; null for the
 * usual table, which needs no second read. Drizzle reads integers as JS numbers, which rounded 2^53 + 1 to 2^53
 * and made 2^63 − 1 a value PostgreSQL's bigint refuses.
 */
function beyondDouble(src: DbHandle, t: TablePair): { read(after: unknown, limit: number): Record<string, unknown>[] } | null {
  const ints = sqliteConfig(t.sqlite).columns.filter((c) => c.columnType === 'SQLiteInteger').map((c) => `"${c.name}"`);
  if (!ints.length) return null;
  const bound = Number.MAX_SAFE_INTEGER;
  const found = src.sqlite.query(`select 1 from "${t.name}" where ${ints.map((c) => `${c} > ${bound} or ${c} < -${bound}`).join(' or ')} limit 1`).get();
  if (!found) return null;
  const key = `"${t.key.name}"`;
  const first = src.sqlite.query(`select ${ints.join(', ')} from "${t.name}" order by ${key} limit ?`).safeIntegers(true);
  const next = src.sqlite.query(`select ${ints.join(', ')} from "${t.name}" where ${key} > ? order by ${key} limit ?`).safeIntegers(true);
  return { read: (after, limit) => (after === undefined ? first.all(limit) : next.all(after as never, limit)) as Record<string, unknown>[] };
}
