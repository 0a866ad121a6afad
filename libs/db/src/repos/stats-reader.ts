import type { LatencyBinRow, StatsQuery, StatsRow, UsageStatsStore } from './usage-stats';

/** The two result sets of one statistics query. */
export interface StatsResult { rows: StatsRow[]; hist: LatencyBinRow[] }

/** Runs statistics queries: on a worker thread for a database file, inline for an in-memory one. */
export interface StatsReader {
  read(q: StatsQuery): Promise<StatsResult>;
  close(): Promise<void>;
}

/** On the calling thread (in-memory databases, which a second connection cannot open). */
export function inlineStatsReader(repo: UsageStatsStore): StatsReader {
  return { read: async (q) => ({ rows: await repo.aggregate(q), hist: await repo.latencyHistogram(q) }), close: async () => {} };
}

/** On a worker thread with its own read-only connection to `path`; queries run one at a time, in order. */
export function workerStatsReader(path: string): StatsReader {
  const worker = new Worker(new URL('../stats-worker.ts', import.meta.url).href);
  worker.postMessage({ open: path });
  worker.unref();
  const pending = new Map<number, { resolve: (r: StatsResult) => void; reject: (e: Error) => void }>();
  let next = 1;
  let closed: (() => void) | null = null;
  worker.onmessage = (ev: MessageEvent<{ id?: number; rows?: StatsRow[]; hist?: LatencyBinRow[]; error?: string; closed?: true }>) => {
    const m = ev.data;
    if (m.closed) { closed?.(); return; }
    const p = pending.get(m.id!);
    pending.delete(m.id!);
    if (!p) return;
    if (m.error !== undefined) p.reject(new Error(`statistics query failed: ${m.error}`));
    else p.resolve({ rows: m.rows!, hist: m.hist! });
  };
  worker.onerror = (e) => {
    for (const p of pending.values()) p.reject(new Error(`statistics worker failed: ${e.message}`));
    pending.clear();
  };
  return {
    read(q) {
      const id = next++;
      return new Promise<StatsResult>((resolve, reject) => {
        pending.set(id, { resolve, reject });
        // While a query runs the worker keeps the process alive; idle, it does not.
        if (pending.size === 1) worker.ref();
        worker.postMessage({ id, q });
      }).finally(() => { if (pending.size === 0) worker.unref(); });
    },
    close() {
      return new Promise<void>((resolve) => {
        const done = () => { worker.terminate(); resolve(); };
        closed = done;
        worker.postMessage({ close: true });
        setTimeout(done, 1000).unref();
      });
    },
  };
}
