import { sql } from 'drizzle-orm';
import type { PgDb } from '../pg/client';
import { historyTimeout, type HistoryListings, type StatsReader } from '../repos/history-reader';
import { PgLedgerRepo } from './ledger';
import { PgUsageLogsRepo, pgWithKeyOwner } from './usage-logs';
import { PgUsageStatsRepo } from './usage-stats';

/**
 * The repositories one history read uses, on that read's transaction (their constructors only keep the handle),
 * and `owned`: pgWithKeyOwner on it (a deleted key's filter walks its owner's rows, not the table).
 */
interface Repos {
  logs: PgUsageLogsRepo; stats: PgUsageStatsRepo; ledger: PgLedgerRepo;
  owned<T extends { userId?: number; apiKeyId?: number }>(f: T): Promise<T>;
}

/**
 * The history reads on PostgreSQL, each in a read-only transaction of its own whose statements may run at most
 * `timeoutMs` (`SET LOCAL statement_timeout`, so the pool's connections keep no limit for the settlements): a
 * query over a wide range or an unindexed filter is cancelled by the server (57014) and answered 503
 * `history_timeout`, instead of holding a history slot and a pool connection for as long as it runs. One
 * transaction also gives a page and its count one snapshot, and takes one pool connection, not two.
 */
export function pgHistoryReads(db: PgDb, timeoutMs: number): { listings: HistoryListings; stats: StatsReader } {
  const limit = sql.raw(`set local statement_timeout = ${Math.trunc(timeoutMs)}`);
  const timed = async <T>(fn: (r: Repos) => Promise<T>): Promise<T> => {
    try {
      return await db.transaction(async (tx) => {
        await tx.execute(limit);
        const on = tx as unknown as PgDb;
        return fn({ logs: new PgUsageLogsRepo(on), stats: new PgUsageStatsRepo(on), ledger: new PgLedgerRepo(on), owned: (f) => pgWithKeyOwner(on, f) });
      }, { accessMode: 'read only' });
    } catch (e) {
      if (cancelled(e)) throw historyTimeout(timeoutMs, e);
      throw e;
    }
  };
  return {
    listings: {
      logList: (f) => timed(async (r) => r.logs.list(await r.owned(f))),
      exportPage: (f, after, n) => timed(async (r) => r.stats.exportPage(await r.owned(f), after, n)),
      ledgerList: (f) => timed((r) => r.ledger.list(f)),
      close: async () => {},
    },
    stats: {
      read: (q) => timed(async (r) => {
        const owned = await r.owned(q);
        return { rows: await r.stats.aggregate(owned), hist: await r.stats.latencyHistogram(owned) };
      }),
      close: async () => {},
    },
  };
}

/** PostgreSQL's query_canceled (statement_timeout), thrown by postgres.js or wrapped by drizzle. */
function cancelled(e: unknown): boolean {
  for (let c: any = e, i = 0; c && i < 4; c = c.cause, i++) if (c.code === '57014') return true;
  return false;
}
