import { bigint } from 'drizzle-orm/pg-core';

/**
 * Column helpers shared by the PostgreSQL tables.
 *
 * SQLite's `integer` is 64-bit, PostgreSQL's is 32-bit: quotas reach 1e15, so money, token counts,
 * counters, durations and timestamps are `bigint` read as a JS number (exact up to 2^53). Plain
 * `integer` is kept only for enumerations and small settings (role, status, priority, weight…).
 */
export const big = (name: string) => bigint(name, { mode: 'number' });

/**
 * Primary key for tables whose SQLite twin has an autoincrement id. "By default" (not "always") so
 * copying rows from SQLite can keep their ids; the copier then advances the sequence.
 */
export const idColumn = () => big('id').primaryKey().generatedByDefaultAsIdentity();
