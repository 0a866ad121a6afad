import { causeChain } from '@gw/core';

/**
 * Whether `err` (or what it wraps) is the database refusing a duplicate in unique index `index` on
 * `table.column`: PostgreSQL's 23505 names the index, SQLite's message names the column. Lets a service turn
 * the loser of a check-then-write race (another request, or another node, wrote the same value between the
 * check and the write) into the same 409 the check gives, instead of a 500.
 */
export function isUniqueViolation(err: unknown, index: string, table: string, column: string): boolean {
  return causeChain(err).some((e) => (e.code === '23505' && (e.constraint_name === index || e.constraint === index))
    || (typeof e.message === 'string' && e.message.includes(`UNIQUE constraint failed: ${table}.${column}`)));
}

/**
 * Whether `err` (or what it wraps) is the database refusing a row whose parent row `table`.`column` names is gone
 * (PostgreSQL 23503 names the constraint; SQLite says only "FOREIGN KEY constraint failed"): the parent was deleted
 * between the service's check and its write, so the answer is the 404 the check gives for a missing parent.
 */
export function isForeignKeyViolation(err: unknown, constraint: string): boolean {
  return causeChain(err).some((e) => (e.code === '23503' && (e.constraint_name === constraint || e.constraint === constraint))
    || (typeof e.message === 'string' && e.message.includes('FOREIGN KEY constraint failed')));
}
