/**
 * `bun run bench/log-stats.ts [--rows 1000000] [--db path] [--plans]`: usage statistics and export on a
 * year of logs. Fills a SQLite file (migrated like the gateway's) with rows spread over 365 days in one
 * transaction, then times the statistics queries through the real service and the export stream.
 * `--db` reuses a filled file; `--plans` prints EXPLAIN QUERY PLAN of every statement.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { openDatabase, UsageStatsRepo, inlineStatsReader, workerStatsReader, type StatsQuery } from '@gw/db';
import { UsageStatsService, exportUsageLogs, type StatsQueryParams } from '@gw/billing';
import { seedUsageRows } from '../tests/helpers/usage-seed';

const { values: args } = parseArgs({ options: { rows: { type: 'string', default: '1000000' }, db: { type: 'string' }, plans: { type: 'boolean', default: false } } });
const ROWS = Number(args.rows);
const DAY = 86_400;
const END = Date.UTC(2026, 10, 1) / 1000;
const START = END - 365 * DAY;

const dir = args.db ? null : mkdtempSync(join(tmpdir(), 'gw-logstats-'));
const dbPath = args.db ?? join(dir!, 'g.db');
const h = openDatabase(dbPath, { checkpointMs: 0 });
const have = (h.sqlite.query('select count(*) n from usage_logs').get() as { n: number }).n;
if (have < ROWS) {
  const t0 = performance.now();
  seedUsageRows(h.sqlite, { rows: ROWS - have, from: START, spanSeconds: END - START, users: 50, requestPrefix: `req_b${have}_` });
  const s = (performance.now() - t0) / 1000;
  console.log(`seeded ${ROWS - have} rows in ${s.toFixed(1)} s (${Math.round((ROWS - have) / s)} rows/s)`);
  h.sqlite.exec('PRAGMA wal_checkpoint(TRUNCATE)');
}
const repo = new UsageStatsRepo(h.db);
const reader = workerStatsReader(dbPath, 600_000);
const svc = new UsageStatsService(reader, () => END);
const inline = new UsageStatsService(inlineStatsReader(repo), () => END);

function plan(label: string, stmt: { toSQL(): { sql: string; params: unknown[] } }) {
  if (!args.plans) return;
  const { sql, params } = stmt.toSQL();
  const rows = h.sqlite.query(`EXPLAIN QUERY PLAN ${sql}`).all(...(params as any[])) as { detail: string }[];
  console.log(`  plan ${label}: ${rows.map((r) => r.detail).join(' | ')}`);
}

async function time<T>(label: string, fn: () => Promise<T>, runs = 3): Promise<T> {
  let out!: T;
  const ms: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    out = await fn();
    ms.push(performance.now() - t0);
  }
  console.log(`${label}: best ${Math.min(...ms).toFixed(0)} ms, median ${ms.sort((a, b) => a - b)[Math.floor(runs / 2)]!.toFixed(0)} ms`);
  return out;
}

const someUser = (h.sqlite.query('select user_id from usage_logs where id = 1').get() as { user_id: number }).user_id;
const cases: Array<[string, StatsQueryParams, number?]> = [
  ['year by day, grouped by model', { start_timestamp: START, end_timestamp: END - 1, group_by: 'model' }],
  ['31 days by hour, grouped by user', { start_timestamp: END - 31 * DAY + 1, end_timestamp: END, granularity: 'hour', group_by: 'user' }],
  ["one user's year by day, by model (/self)", { start_timestamp: START, end_timestamp: END - 1, group_by: 'model' }, someUser],
  ["one model's year by day, by channel", { start_timestamp: START, end_timestamp: END - 1, group_by: 'channel', model: 'gpt-4o' }],
  ["one key's 30 days by day", { start_timestamp: END - 30 * DAY, end_timestamp: END, token_id: someUser * 100 }],
];
console.log(`\n${ROWS} rows over 365 days`);
for (const [label, q, owner] of cases) {
  const sq: StatsQuery = svc.query(q, owner);
  plan('aggregate', repo.aggregateQuery(sq));
  plan('histogram', repo.latencyHistogramQuery(sq));
  const r = await time(label, () => svc.stats(q, owner));
  if (label.startsWith('year')) await time(`${label} (inline, default page cache)`, () => inline.stats(q, owner), 1);
  console.log(`  ${r.items.length} rows, ${r.items.reduce((s, i) => s + i.requests, 0)} requests`);
}

async function drain(label: string, where: Parameters<typeof exportUsageLogs>[1]) {
  plan('export page', repo.exportPageQuery(where, { createdAt: START + DAY, id: 1000 }, 1000));
  const t0 = performance.now();
  const reader = (await exportUsageLogs(repo, where, 'csv', { admin: true })).getReader();
  let bytes = 0;
  let lines = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    bytes += value.length;
    for (let i = 0; i < value.length; i++) if (value[i] === 10) lines++;
  }
  const s = (performance.now() - t0) / 1000;
  console.log(`export ${label}: ${lines - 1} rows, ${(bytes / 1048576).toFixed(0)} MB in ${s.toFixed(1)} s = ${Math.round((lines - 1) / s)} rows/s`);
}
console.log('');
await drain('all rows, CSV', {});
await drain('one user, CSV', { userId: someUser });
await drain('one model, last 30 days, CSV', { model: 'gpt-4o', from: END - 30 * DAY });

await reader.close();
h.close();
if (dir) rmSync(dir, { recursive: true, force: true });
