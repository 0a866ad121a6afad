import { GatewayError } from '@gw/core';
import { fileId } from '../file-id';
import type { HistoryAnswer, HistoryOp, HistoryOps, HistoryRequest } from '../history-worker';
import type { LedgerFilter, LedgerRow } from './ledger';
import type { UsageLogFilter, UsageLogRow, UsageLogWhere } from './usage-logs';
import type { ExportCursor, LatencyBinRow, StatsQuery, StatsRow, UsageStatsStore } from './usage-stats';

/** The two result sets of one statistics query. */
export interface StatsResult { rows: StatsRow[]; hist: LatencyBinRow[] }

/** Runs statistics queries: on a worker thread for a database file, inline for an in-memory one. */
export interface StatsReader {
  read(q: StatsQuery): Promise<StatsResult>;
  close(): Promise<void>;
}

/**
 * The listings over the stored history (usage logs and their export pages, the ledger): on a worker thread for
 * a database file, on the stores otherwise (an in-memory database, which a second connection cannot open, and
 * PostgreSQL, whose server runs them).
 */
export interface HistoryListings {
  logList(f: UsageLogFilter): Promise<{ items: UsageLogRow[]; total: number }>;
  exportPage(f: UsageLogWhere, after: ExportCursor | null, limit: number): Promise<UsageLogRow[]>;
  ledgerList(f: LedgerFilter): Promise<{ items: LedgerRow[]; total: number }>;
  close(): Promise<void>;
}

/** On the calling thread (in-memory databases, which a second connection cannot open). */
export function inlineStatsReader(repo: UsageStatsStore): StatsReader {
  return { read: async (q) => ({ rows: await repo.aggregate(q), hist: await repo.latencyHistogram(q) }), close: async () => {} };
}

/** The listings through the stores themselves. */
export function inlineHistoryListings(s: {
  usageLogs: { list(f: UsageLogFilter): Promise<{ items: UsageLogRow[]; total: number }> };
  usageStats: Pick<UsageStatsStore, 'exportPage'>;
  ledger: { list(f: LedgerFilter): Promise<{ items: LedgerRow[]; total: number }> };
}): HistoryListings {
  return {
    logList: (f) => s.usageLogs.list(f), exportPage: (f, after, limit) => s.usageStats.exportPage(f, after, limit),
    ledgerList: (f) => s.ledger.list(f), close: async () => {},
  };
}

/** In a child process with its own read-only connection to `path`; queries run one at a time, in order, each for at most `timeoutMs`. */
export function workerStatsReader(path: string, timeoutMs: number): StatsReader {
  // The statistics' GROUP BY sorter spills to temporary files beyond the page cache; 64 MiB keeps a year in memory.
  const w = historyWorker(path, 65_536, timeoutMs);
  return { read: (q) => w.call('stats', q), close: w.close };
}

/**
 * In a child process of their own (not the statistics': a listing would wait behind a year's aggregate there),
 * with a read-only connection to `path`; queries run one at a time, in order, each for at most `timeoutMs`.
 */
export function workerHistoryListings(path: string, timeoutMs: number): HistoryListings {
  const w = historyWorker(path, 2_000, timeoutMs);
  return {
    logList: (f) => w.call('logList', f), exportPage: (f, after, limit) => w.call('exportPage', f, after, limit),
    ledgerList: (f) => w.call('ledgerList', f), close: w.close,
  };
}

interface HistoryWorker {
  call<K extends HistoryOp>(op: K, ...args: Parameters<HistoryOps[K]>): Promise<ReturnType<HistoryOps[K]>>;
  close(): Promise<void>;
}

interface Pending { resolve: (r: any) => void; reject: (e: Error) => void; timer?: ReturnType<typeof setTimeout> }

/**
 * The calling side of history-worker.ts. The process starts on the first call (a gateway that is never asked
 * keeps none); rows come back by structured clone ('advanced' IPC), so numbers past 2^31, BigInt sums, booleans
 * and nulls arrive as the child's drizzle mapped them, as they would inline. A query still running `timeoutMs`
 * after the child could start it is stopped by killing the child: its caller gets 503 `history_timeout`, anything
 * queued behind it 503 `history_unavailable`, and the next call starts a new child.
 */
function historyWorker(path: string, cacheKiB: number, timeoutMs: number): HistoryWorker {
  type Child = ReturnType<typeof spawnChild>;
  let child: Child | null = null;
  let opened = false;
  const pending = new Map<number, Pending>();
  let next = 1;
  let closed: (() => void) | null = null;
  let closing = false;
  // The file as the gateway opened it (this runs at start-up, after openDatabase): the child refuses another.
  const file = fileId(path);
  /** Settles every waiting call: none may wait on a process that will not answer (its caller would hold a history slot for good). */
  const rejectAll = (why: string, cause?: unknown) => {
    for (const p of pending.values()) { clearTimeout(p.timer); p.reject(unavailable(why, cause)); }
    pending.clear();
  };
  /** Timed from when the child can run it (after it opened the database), not from its start-up. */
  const arm = (id: number, p: Pending, c: Child) => {
    p.timer = setTimeout(() => {
      if (child !== c || !pending.has(id)) return;
      pending.delete(id);
      child = null;
      c.kill(9);
      p.reject(historyTimeout(timeoutMs));
      rejectAll('history reads were restarted: a query before this one ran past its time limit');
    }, timeoutMs);
  };
  const spawnChild = () => {
    const c = Bun.spawn([process.execPath, new URL('../history-worker.ts', import.meta.url).pathname], {
      serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit'], env: readerEnv(process.env),
      ipc(m: HistoryAnswer) {
        if (child !== c) return;
        if (m.opened) { opened = true; for (const [id, p] of pending) arm(id, p, c); return; }
        if (m.closed) { closed?.(); return; }
        if (m.failed !== undefined) { child = null; rejectAll(`history worker failed: ${m.failed}`); return; }
        const p = pending.get(m.id!);
        pending.delete(m.id!);
        if (!p) return;
        clearTimeout(p.timer);
        if (m.error !== undefined) p.reject(new Error(`history query failed: ${m.error}`));
        else p.resolve(m.result);
      },
    });
    // A child that ended on its own (its database would not open, it crashed) answers nothing more: its callers
    // are rejected, and the next call starts a new one, rather than waiting forever in a history slot.
    void c.exited.then((code) => {
      if (child !== c) return;
      child = null;
      rejectAll(`history worker exited (${c.signalCode ?? code})`);
    });
    return c;
  };
  const start = (): Child => {
    const c = spawnChild();
    child = c;
    opened = false;
    c.send({ open: path, cacheKiB, file } satisfies HistoryRequest);
    c.unref();
    return c;
  };
  return {
    call(op, ...args) {
      if (closing) return Promise.reject(unavailable('history reads are closed: this server is shutting down'));
      const c = child ?? start();
      const id = next++;
      return new Promise<any>((resolve, reject) => {
        const p: Pending = { resolve, reject };
        pending.set(id, p);
        // While a query runs the child keeps this process alive; idle, it does not.
        if (pending.size === 1) c.ref();
        try {
          c.send({ id, op, args } satisfies HistoryRequest);
        } catch (e) {
          // Arguments that cannot be cloned: nothing was sent, so nothing will answer this id.
          pending.delete(id);
          reject(e);
          return;
        }
        if (opened) arm(id, p, c);
      }).finally(() => { if (pending.size === 0) c.unref(); });
    },
    close() {
      closing = true;
      const c = child;
      if (!c) return Promise.resolve();
      child = null;
      return new Promise<void>((resolve) => {
        // A query still running after the grace period is cut off: its caller is answered, not left waiting.
        const done = () => { c.kill(9); rejectAll('history reads are closed: this server is shutting down'); resolve(); };
        closed = done;
        try { c.send({ close: true } satisfies HistoryRequest); } catch { done(); }
        setTimeout(done, 1000).unref();
      });
    },
  };
}

/**
 * The variables the reader process gets: where temporary files go (SQLite spills a large GROUP BY there), the
 * time zone and locale, PATH and HOME. Not the rest of the gateway's: SECRET_KEY, ROOT_PASSWORD, DATABASE_URL and
 * the providers' keys would otherwise sit in a process that reads only usage rows (and in its /proc environ).
 */
const READER_ENV = ['PATH', 'HOME', 'TMPDIR', 'SQLITE_TMPDIR', 'TZ', 'LANG', 'LC_ALL'];
export function readerEnv(env: Record<string, string | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k of READER_ENV) if (env[k] !== undefined) out[k] = env[k]!;
  return out;
}

/** A history read the worker cannot serve (its thread failed, or the gateway is closing): 503, to retry. */
const unavailable = (message: string, cause?: unknown) =>
  new GatewayError(503, 'history_unavailable', message, { cause, headers: { 'retry-after': '1' } });

/** A history query stopped at its time limit (either backend): 503, since a narrower query can be served. */
export const historyTimeout = (timeoutMs: number, cause?: unknown) =>
  new GatewayError(503, 'history_timeout', `This history query ran longer than ${timeoutMs} ms (HISTORY_QUERY_TIMEOUT_MS) and was stopped: narrow its time range or filters`, {
    cause, headers: { 'retry-after': '1' },
  });
