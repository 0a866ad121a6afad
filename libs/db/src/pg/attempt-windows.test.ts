import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { stepWindow, type WindowCounter } from '@gw/core';
import { openPgTestDb, requirePg, type PgTestDb } from '../../../../tests/helpers/postgres';
import { PG_SWEEP, pgAttemptWindows } from './attempt-windows';

const available = await requirePg('libs/db/src/pg/attempt-windows.test.ts');
let t: PgTestDb;
// Wider than the races below, so concurrent hits run on separate connections (as on separate nodes).
beforeAll(async () => { if (available) t = await openPgTestDb('gw_attempts', { max: 12 }); });
afterAll(async () => { if (available) await t?.close(); });

describe.skipIf(!available)('attempt windows in PostgreSQL', () => {
  test('count, hit up to the limit then a wait in seconds, reset; flows and keys apart', async () => {
    const windows = pgAttemptWindows(t.handle.sql);
    const now = 1_800_000_000_000;
    const w = windows('login-ip', 60_000, () => now);
    const other = windows('redeem', 60_000, () => now);
    expect(await w.count('1.2.3.4')).toBe(0);
    for (let i = 0; i < 3; i++) expect(await w.hit('1.2.3.4', 3)).toBe(0);
    // Full at the window's first ms: at its end the window still weighs whole (3 of 3), so a hit passes 1 ms later.
    expect(await w.hit('1.2.3.4', 3)).toBe(61);
    expect(await w.count('1.2.3.4')).toBe(3);
    expect(await w.count('5.6.7.8')).toBe(0);
    expect(await other.count('1.2.3.4')).toBe(0);
    await w.hit('u1', Number.MAX_SAFE_INTEGER);
    await w.hit('u1', Number.MAX_SAFE_INTEGER);
    expect(await w.count('u1')).toBe(2);
    await w.reset('1.2.3.4');
    expect(await w.count('1.2.3.4')).toBe(0);
    expect(await w.hit('1.2.3.4', 3)).toBe(0);
  });

  test('nodes whose clocks straddle a window edge do not wipe each other\'s counts', async () => {
    // Node A's clock is 200 ms past the edge, node B's 200 ms before it. Before, a hit from B on a row A had moved
    // to the next window matched neither window and started the counts again from 1: alternating nodes around
    // every edge, a guesser was never refused.
    const edge = 1_800_000_120_000;
    const windows = pgAttemptWindows(t.handle.sql);
    const a = windows('password-change', 60_000, () => edge + 200);
    const b = windows('password-change', 60_000, () => edge - 200);
    const key = `skew${Math.random()}`;
    const answers: number[] = [];
    for (let i = 0; i < 8; i++) answers.push(await (i % 2 ? b : a).hit(key, 5));
    expect(answers.filter((w) => w === 0)).toHaveLength(5);
    expect(answers.slice(5).every((w) => w > 0)).toBe(true);
  });

  test('a row from a clock far ahead does not pin the key: it starts again', async () => {
    const now = 1_800_000_300_000;
    const windows = pgAttemptWindows(t.handle.sql);
    const ahead = windows('login-ip', 60_000, () => now + 10 * 60_000);
    const here = windows('login-ip', 60_000, () => now);
    const key = `far${Math.random()}`;
    for (let i = 0; i < 5; i++) expect(await ahead.hit(key, 5)).toBe(0);
    expect(await here.hit(key, 5)).toBe(0);
  });

  test('a row a hit renews while the sweep waits for its lock stays', async () => {
    const sql = t.handle.sql;
    const old = 1_800_000_000_000;
    const now = old + 10 * 60_000;
    const key = `login-ip:renew${Math.random()}`;
    await sql`insert into attempt_windows (key, window_ms, start, cur, prev) values (${key}, 60000, ${old}, 1, 0)`;
    let sweep: Promise<number> | undefined;
    await sql.begin(async (tx) => {
      // A hit renewing the row (the upsert's conflict branch), its transaction still open, while the sweep has
      // picked the row's old version (idle for two windows) and waits for its lock.
      await tx`update attempt_windows set start = ${now - (now % 60_000)}, cur = 1, prev = 0 where key = ${key}`;
      // As the planner does on a large table: a TID scan (on a small one it reads the table and filters, which
      // rechecks the ctid on the renewed row anyway).
      sweep = sql.begin(async (s) => {
        await s`set local enable_seqscan = off`;
        return (await s.unsafe(PG_SWEEP, [now])).count;
      });
      await Bun.sleep(300);
    });
    await sweep;
    expect([...await sql`select cur from attempt_windows where key = ${key}`]).toEqual([{ cur: 1 }]);
  });

  test('every hit along a timeline is answered as stepWindow answers it (window roll, weighted previous window)', async () => {
    let now = 1_800_000_060_000;
    const w = pgAttemptWindows(t.handle.sql)('2fa', 60_000, () => now);
    let model: WindowCounter | undefined;
    const key = `k${Math.random()}`;
    // Hits every 7 s for four windows against a limit of 4: full windows, a roll, the previous window's decay.
    for (let i = 0; i < 36; i++, now += 7_000) {
      const { result, next } = stepWindow(model, { limit: 4, windowMs: 60_000 }, now);
      if (result.ok) model = next;
      const wait = await w.hit(key, 4);
      expect([i, wait]).toEqual([i, result.ok ? 0 : Math.max(1, Math.ceil(result.retryAfterMs / 1000))]);
    }
  });

  test('concurrent hits from many connections pass exactly the limit (no count lost, none passed twice)', async () => {
    // One instance per "node", each racing on its own connections of the pool.
    // Mid-window on a fixed clock: a window edge inside the burst would weigh the first hits less.
    const nodes = [0, 1, 2].map(() => pgAttemptWindows(t.handle.sql)('login-name', 60_000, () => 1_800_000_030_000));
    const key = `burst-${Math.random()}`;
    const waits = await Promise.all(Array.from({ length: 30 }, (_, i) => nodes[i % 3]!.hit(key, 7)));
    expect(waits.filter((x) => x === 0).length).toBe(7);
  });
});
