import { sql, type SQL, type SQLWrapper } from 'drizzle-orm';
import type { PgDb } from '../pg/client';

/**
 * A pool or an open transaction: a repo method given one runs its statements there. Unlike
 * bun:sqlite, a pooled connection does not carry "the open transaction", so it is passed explicitly.
 */
export type PgWriter = Pick<PgDb, 'select' | 'insert' | 'update' | 'delete' | 'execute'>;

const UPPER = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ';
const LOWER = 'abcdefghijklmnopqrstuvwxyz';

/**
 * SQLite's `lower()` and `LIKE` fold ASCII letters only ('É' stays 'É'); PostgreSQL's fold every
 * letter the collation knows. Folding with `translate` keeps both backends giving the same answers.
 */
export function asciiLower(x: SQLWrapper | string): SQL<string> {
  return sql<string>`translate(${x}, ${UPPER}, ${LOWER})`;
}

/** SQLite `instr(lower(col), lower(needle)) > 0`: a substring test where the needle is never a pattern. */
export function containsFolded(col: SQLWrapper, needle: string): SQL {
  return sql`strpos(${asciiLower(col)}, ${asciiLower(needle)}) > 0`;
}

/**
 * SQLite `col LIKE pattern`: ASCII-case-insensitive, `%` and `_` are wildcards and there is no escape
 * character (PostgreSQL's default escape is a backslash, hence `escape ''`).
 */
export function likeFolded(col: SQLWrapper, pattern: string): SQL {
  return sql`${asciiLower(col)} like ${asciiLower(pattern)} escape ''`;
}

/**
 * SQLite orders text bytewise (BINARY); PostgreSQL by the database collation (en_US sorts 'a' before
 * 'B'). Ordering under "C" gives the SQLite order on every server.
 */
export function collateC(col: SQLWrapper): SQL {
  return sql`${col} collate "C"`;
}
