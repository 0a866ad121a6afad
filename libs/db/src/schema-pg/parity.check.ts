/**
 * Compile-time proof that the SQLite and PostgreSQL schemas describe the same rows: for every table
 * exported by either, the select and insert types must have the same columns, with the same value
 * types and the same optionality. `bun run typecheck` fails on any drift and names the column.
 * This file is only type-checked, never imported.
 */
import type { InferInsertModel, InferSelectModel, Table } from 'drizzle-orm';
import type * as Sqlite from '../schema';
import type * as Pg from './index';

/** Exact type equality (not just assignability: `any`, unions and readonly are told apart). */
export type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false;

type TablesOf<M> = { [K in keyof M as M[K] extends Table ? K : never]: M[K] };
/** SQLite mode's own tables (what PostgreSQL mode keeps in Redis) have no twin to compare. */
type SqliteTables = Omit<TablesOf<typeof Sqlite>, (typeof Sqlite.sqliteOnlyTables)[number]>;
type PgTables = TablesOf<typeof Pg>;

type IsOptional<T, K extends keyof T> = {} extends Pick<T, K> ? true : false;

/**
 * Columns already in the PostgreSQL schema whose SQLite twin is being added on another branch.
 * Exempt only while SQLite lacks them: once SQLite has the column it is compared like any other,
 * so this list can be emptied after the merge without further change.
 */
type PendingInSqlite = Record<never, never>;
type Pending<T extends string> = T extends keyof PendingInSqlite ? PendingInSqlite[T] : never;

/** `table.column` for every column present on one side only, or differing in type or optionality. */
export type ColumnDiff<T extends string, S, P, Exempt = never> = {
  [C in keyof S | keyof P]: C extends keyof S
    ? C extends keyof P
      ? Equal<S[C], P[C]> extends true
        ? IsOptional<S, C> extends IsOptional<P, C> ? never : `${T}.${C & string}`
        : `${T}.${C & string}`
      : `${T}.${C & string}`
    : C extends Exempt ? never : `${T}.${C & string}`;
}[keyof S | keyof P];

// `infer U extends Table` binds the concrete table; narrowing with `T extends Table ? …<T>` would
// intersect it with the generic Table and blur its insert type.
type Select<T> = T extends infer U extends Table ? InferSelectModel<U> : never;
type Insert<T> = T extends infer U extends Table ? InferInsertModel<U> : never;

type TableDiff<K extends string> =
  K extends keyof SqliteTables & keyof PgTables
    ? | ColumnDiff<K, Select<SqliteTables[K]>, Select<PgTables[K]>, Pending<K>>
      | ColumnDiff<`${K} (insert)`, Insert<SqliteTables[K]>, Insert<PgTables[K]>, Pending<K>>
    : `${K} (table missing on one side)`;

/** Every mismatch across all tables; `never` when the schemas agree. */
export type SchemaDrift = TableDiff<(keyof SqliteTables | keyof PgTables) & string>;

// The assignment fails to compile while SchemaDrift is not `never`; the error names the drifting columns.
export const schemaDrift: [SchemaDrift] extends [never] ? 'none' : `drift: ${SchemaDrift}` = 'none';

// The detector itself must detect: a column on one side only, a type change, an optionality change.
type Expect<T extends true> = T;
export type DetectorSelfTest = [
  Expect<Equal<ColumnDiff<'t', { a: number }, { a: number; b: string }>, 't.b'>>,
  Expect<Equal<ColumnDiff<'t', { a: number }, { a: number | null }>, 't.a'>>,
  Expect<Equal<ColumnDiff<'t', { a?: number }, { a: number }>, 't.a'>>,
  Expect<Equal<ColumnDiff<'t', { a: number }, { a: number; b: string }, 'b'>, never>>,
  Expect<Equal<ColumnDiff<'t', { a: number; b: string }, { a: number }, 'b'>, 't.b'>>,
];
