/**
 * Worker thread that runs usage statistics on its own read-only connection. A year of logs takes
 * seconds to aggregate, and bun:sqlite is synchronous: on the request thread that would stall every
 * relayed request for as long. WAL lets this reader see every committed row without blocking the writer.
 */
import { Database } from 'bun:sqlite';
import { drizzle } from 'drizzle-orm/bun-sqlite';
import * as schema from './schema';
import { UsageStatsRepo, type StatsQuery } from './repos/usage-stats';

declare const self: Worker;

let repo: UsageStatsRepo | null = null;
let sqlite: Database | null = null;

self.onmessage = (ev: MessageEvent<{ open?: string; close?: true; id?: number; q?: StatsQuery }>) => {
  const m = ev.data;
  if (m.open) {
    sqlite = new Database(m.open, { readonly: true, strict: true });
    sqlite.exec('PRAGMA busy_timeout = 5000');
    // The GROUP BY sorter spills to temporary files beyond the page cache; 64 MiB keeps a year in memory.
    sqlite.exec('PRAGMA cache_size = -65536');
    repo = new UsageStatsRepo(drizzle({ client: sqlite, schema }));
    return;
  }
  if (m.close) { sqlite?.close(); self.postMessage({ closed: true }); return; }
  try {
    self.postMessage({ id: m.id, rows: repo!.aggregateRows(m.q!), hist: repo!.latencyHistogramQuery(m.q!).all() });
  } catch (e) {
    self.postMessage({ id: m.id, error: String((e as Error)?.message ?? e) });
  }
};
