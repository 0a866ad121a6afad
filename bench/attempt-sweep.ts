/**
 * `bun run bench/attempt-sweep.ts`: time of one sweep of attempt_windows (the delete of rows idle for two
 * windows, run every 1024 attempt hits) with ROWS live rows (default 200,000), as a flood of logins from as
 * many addresses leaves them: nothing to delete, so what is measured is what the sweep reads to find that out.
 * Also one sweep of ROWS rows all idle (the first sweep after such a flood has passed).
 * SQLite on a file in a temporary directory, PostgreSQL (GW_TEST_PG, default postgres://postgres@127.0.0.1:5432/test)
 * in a schema of its own, dropped at the end. Median of RUNS (default 7) sweeps each.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase, sqliteSweepAttemptWindows } from '@gw/db';
import { openPostgres, pgSweepAttemptWindows } from '@gw/db/pg';

const ROWS = Number(process.env.ROWS ?? 200_000);
const RUNS = Number(process.env.RUNS ?? 7);
const PG_URL = process.env.GW_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test';
const WINDOW = 60_000;
const NOW = 1_800_000_000_000;

async function median(op: () => unknown): Promise<number> {
  const ms: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const t = performance.now();
    await op();
    ms.push(performance.now() - t);
  }
  return ms.sort((a, b) => a - b)[Math.floor(RUNS / 2)]!;
}

/** Wall time of sweeping `rows` idle rows away, sweep after sweep until none is left, and the sweeps it took. */
async function drain(sweep: () => Promise<number> | number): Promise<{ ms: number; sweeps: number; longest: number }> {
  let sweeps = 0;
  let longest = 0;
  const t0 = performance.now();
  for (;;) {
    const t = performance.now();
    const n = await sweep();
    longest = Math.max(longest, performance.now() - t);
    sweeps++;
    if (n === 0) break;
  }
  return { ms: performance.now() - t0, sweeps, longest };
}

const fmt = (ms: number) => `${ms.toFixed(2)} ms`;

async function sqlite(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'gw-sweep-'));
  const h = openDatabase(join(dir, 'bench.db'));
  try {
    const fill = (start: number) => h.sqlite.run(
      `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${ROWS})
       INSERT INTO attempt_windows (key, window_ms, start, cur, prev) SELECT 'login-ip:' || i, ${WINDOW}, ${start}, 1, 0 FROM n`);
    fill(NOW);
    h.sqlite.run('ANALYZE');
    const live = await median(() => sqliteSweepAttemptWindows(h.sqlite, NOW));
    h.sqlite.run('DELETE FROM attempt_windows');
    fill(NOW - 3 * WINDOW);
    const idle = await drain(() => sqliteSweepAttemptWindows(h.sqlite, NOW));
    console.log(`SQLite      ${ROWS} live rows: one sweep ${fmt(live)}; ${ROWS} idle rows: ${idle.sweeps - 1} sweeps to clear, longest ${fmt(idle.longest)}, total ${fmt(idle.ms)}`);
  } finally {
    h.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function pg(): Promise<void> {
  const schema = `gw_sweep_bench_${process.pid}`;
  const h = await openPostgres(PG_URL, { schema, max: 2 });
  try {
    const fill = (start: number) => h.sql.unsafe(
      `insert into attempt_windows (key, window_ms, start, cur, prev) select 'login-ip:' || i, ${WINDOW}, ${start}, 1, 0 from generate_series(1, ${ROWS}) i`);
    await fill(NOW);
    await h.sql`vacuum analyze attempt_windows`;
    const live = await median(() => pgSweepAttemptWindows(h.sql, NOW));
    await h.sql`truncate attempt_windows`;
    await fill(NOW - 3 * WINDOW);
    await h.sql`analyze attempt_windows`;
    const idle = await drain(() => pgSweepAttemptWindows(h.sql, NOW));
    console.log(`PostgreSQL  ${ROWS} live rows: one sweep ${fmt(live)}; ${ROWS} idle rows: ${idle.sweeps - 1} sweeps to clear, longest ${fmt(idle.longest)}, total ${fmt(idle.ms)}`);
  } finally {
    await h.sql.unsafe(`drop schema if exists "${schema}" cascade`);
    await h.close();
  }
}

await sqlite();
await pg();
