/**
 * Child process that runs history reads (statistics, usage-log listings and export pages, ledger listings) on
 * its own read-only connection. bun:sqlite is synchronous: on the request thread a year's aggregate (seconds)
 * or a listing that counts by scanning 200k rows (16-19 ms) stalls every relayed request for as long. WAL lets
 * this reader see every committed row without blocking the writer.
 * A process, not a worker thread: a query past its time limit must stop, and bun:sqlite has no
 * sqlite3_interrupt; a terminated worker thread goes on running its statement to the end (measured: a statement
 * kept a core busy for seconds after terminate()), a killed process does not.
 */
import { Database } from 'bun:sqlite';
import { Worker } from 'node:worker_threads';
import { fileId } from './file-id';
import { drizzle } from 'drizzle-orm/bun-sqlite';
import * as schema from './schema';
import type { Db } from './client';
import { UsageStatsRepo, type ExportCursor, type StatsQuery } from './repos/usage-stats';
import { listUsageLogs, withKeyOwner, type UsageLogFilter, type UsageLogWhere } from './repos/usage-logs';
import { listLedger, type LedgerFilter } from './repos/ledger';


/** The operations the worker runs, by name; what they return crosses to the caller by structured clone (exact for numbers, BigInts, booleans and nulls). */
function operations(db: Db) {
  const stats = new UsageStatsRepo(db);
  return {
    // A filter by a key the caller could not resolve (a deleted one) walks its owner's rows (withKeyOwner).
    stats: (q: StatsQuery) => {
      const owned = withKeyOwner(db, q);
      return { rows: stats.aggregateRows(owned), hist: stats.latencyHistogramQuery(owned).all() };
    },
    logList: (f: UsageLogFilter) => listUsageLogs(db, withKeyOwner(db, f)),
    exportPage: (f: UsageLogWhere, after: ExportCursor | null, limit: number) => stats.exportPageQuery(withKeyOwner(db, f), after, limit).all(),
    ledgerList: (f: LedgerFilter) => listLedger(db, f),
  };
}

export type HistoryOps = ReturnType<typeof operations>;
export type HistoryOp = keyof HistoryOps;

/** A request to the worker: open the database (once), close it, or run operation `op` with `args`. */
export type HistoryRequest = { open: string; cacheKiB: number; file: string | null } | { close: true } | { id: number; op: HistoryOp; args: unknown[] };

let ops: HistoryOps | null = null;
let sqlite: Database | null = null;

/** An answer to the gateway: a call's result or error, `opened`, `closed`, or `failed` (the database would not open; the process then exits). */
export type HistoryAnswer = { id?: number; result?: unknown; error?: string; opened?: true; closed?: true; failed?: string };

const answer = (m: HistoryAnswer) => process.send!(m);

function open(m: Extract<HistoryRequest, { open: string }>): void {
  sqlite = new Database(m.open, { readonly: true, strict: true });
  // The path is opened again here, maybe long after the gateway opened it: a file moved there since (a restore
  // under a running gateway) would be listed in place of the one the gateway writes.
  if (m.file !== null && fileId(m.open) !== m.file) {
    sqlite.close();
    throw new Error(`the database file at ${m.open} is not the one this gateway opened (replaced while it runs)`);
  }
  sqlite.exec('PRAGMA busy_timeout = 5000');
  // The caller's page cache size: the statistics' worker asks for a year's GROUP BY, the listings' for SQLite's default.
  sqlite.exec(`PRAGMA cache_size = -${m.cacheKiB}`);
  ops = operations(drizzle({ client: sqlite, schema }));
}

// The gateway went away (even killed): nothing will read the answers. Between statements this thread sees it; during
// one, the watchdog thread does. Nothing runs before it watches.
const watchdog = new Worker(new URL('./history-watchdog.ts', import.meta.url), { workerData: { parent: process.ppid } });
const watching = new Promise<void>((resolve) => watchdog.once('message', () => resolve()));
// A watchdog that failed to start would leave every message waiting: end, and the gateway's callers are answered 503.
watchdog.once('error', () => process.exit(1));
watchdog.once('exit', () => process.exit(1));
watchdog.unref();
process.on('disconnect', () => process.exit(0));

// Every message waits for the same promise, so they are still handled in the order they came.
process.on('message', async (m: HistoryRequest) => {
  await watching;
  if ('open' in m) {
    try { open(m); } catch (e) { answer({ failed: String((e as Error)?.message ?? e) }); process.exit(1); }
    answer({ opened: true });
    return;
  }
  if ('close' in m) { sqlite?.close(); answer({ closed: true }); process.exit(0); }
  try {
    const run = ops![m.op] as (...a: unknown[]) => unknown;
    // One read transaction: the statements of one operation (a page and its count) see one snapshot, as they
    // did on the request thread, where no settlement could commit between them.
    const result = sqlite!.transaction(() => run(...m.args))();
    answer({ id: m.id, result });
  } catch (e) {
    answer({ id: m.id, error: String((e as Error)?.message ?? e) });
  }
});
