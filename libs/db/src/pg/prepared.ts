import type { SQL } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import type { PgDb } from './client';

/** What a repository method needs to run its statements: drizzle's `execute`. */
export type PgExecutor = Pick<PgDb, 'execute'>;

const dialect = new PgDialect();

/**
 * `execute` as a named prepared statement on the pool, outside any transaction. drizzle's raw
 * `execute` sends an unnamed statement, so every call is Parse+Describe, then Bind+Execute: two round
 * trips. postgres.js keeps a named statement per connection and text, so a repeated statement is one
 * round trip. For the hot statements that are atomic on their own (one settlement's CTE).
 */
export function preparedExecutor(db: PgDb): PgExecutor {
  return preparedOn(db.$client);
}

/**
 * The same on a given connection or open transaction (postgres.js `begin`'s callback argument).
 * `eager`: each statement is queued on the connection when it is built rather than when awaited, so
 * statements built one after the other go out in that order, whatever awaits them (postgres.js
 * otherwise sends a query on its first `then`, which Promise.all calls a microtask late).
 */
export function preparedOn(client: Pick<PgDb['$client'], 'unsafe'>, opts: { eager?: boolean } = {}): PgExecutor {
  return {
    execute: ((query: SQL) => {
      const q = dialect.sqlToQuery(query);
      const pending = client.unsafe(q.sql, q.params as never[], { prepare: true });
      if (!opts.eager) return pending;
      // Its failure is the awaiting caller's; marked handled now, as postgres.js's own transactions do.
      pending.catch(() => {});
      return pending.execute();
    }) as unknown as PgExecutor['execute'],
  };
}
