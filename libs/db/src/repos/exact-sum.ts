import { sql, type AnyColumn, type SQL } from 'drizzle-orm';

/**
 * Sums of money and token columns, exact at any size. A JS number is exact only to 2^53 − 1, and each
 * database fails differently past it: bun:sqlite hands back an integer sum above 2^53 rounded, and SQLite's
 * sum() raises "integer overflow" (a 500) past 2^63 − 1; PostgreSQL's sum(bigint) is an exact numeric that
 * postgres.js returns as text, which Number() would round. So both dialects answer a sum as decimal text,
 * read into a BigInt.
 */

/** 2^32: SQLite's sum splits every value into its high and low 32 bits. */
const LOW_BITS = 4_294_967_296n;

/**
 * SQLite: the sum of an integer column as two partial sums, of `col >> 32` (arithmetic shift, so negatives
 * work too) and of `col & (2^32 − 1)`. Each part is below 2^32 in magnitude, so neither partial sum can
 * overflow for fewer than 2^31 rows per group, whatever the stored values (any int64); the parts are joined
 * in BigInt by `joinSum`. Text, because a partial sum can itself pass 2^53.
 */
export function sqliteSumParts(col: AnyColumn | SQL): { hi: SQL<string>; lo: SQL<string> } {
  return { hi: sql<string>`cast(sum(${col} >> 32) as text)`, lo: sql<string>`cast(sum(${col} & 4294967295) as text)` };
}

/** The exact sum from `sqliteSumParts`' two parts (null: a group without rows, sum 0). */
export function joinSum(hi: string | number | null, lo: string | number | null): bigint {
  return BigInt(hi ?? 0) * LOW_BITS + BigInt(lo ?? 0);
}

/** PostgreSQL: sum(bigint) is numeric (never overflows); as text it reads into a BigInt exactly. */
export function pgExactSum(col: AnyColumn | SQL): SQL<string> {
  return sql<string>`coalesce(sum(${col}), 0)::text`;
}
