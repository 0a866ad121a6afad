/**
 * `bun run bench/pg-outage.ts`: settlements through PgGroupCommitter (a pool of 10, as a node has) while a
 * TCP proxy in front of PostgreSQL cuts every connection for 0.7-1.3 s, BENCH_CYCLES times (default 20),
 * about 300 settlements a second arriving throughout. Per cut: how long after the database came back the
 * slowest settlement committed. A cut counts as stalled when something waited over 2 s past the return.
 * At the end every settlement must be committed exactly once (balance, ledger and usage rows checked).
 *
 * It found postgres.js's stale write timer (patched, see the README): before, 4-5 cuts in 20 stalled for
 * 2.5 s up to the 15 s settlement deadline.
 */
import { PgGroupCommitter } from '../libs/db/src/pg/group-commit';
import { openPostgres } from '../libs/db/src/pg/client';
import { PgApiKeysRepo, PgUsersRepo } from '../libs/db/src/repos-pg';
import type { SettlementRow } from '../libs/db/src/repos/settlements';
import { openPgTestDb, pgThroughProxy } from '../tests/helpers/postgres';

const CYCLES = Number(process.env.BENCH_CYCLES ?? 20);
const t = await openPgTestDb('gw_bench_outage', { max: 4 });
const { proxy, url } = pgThroughProxy();
const pool = await openPostgres(url, { schema: t.handle.schema, max: 10 });
const users: Array<{ userId: number; keyId: number }> = [];
for (let i = 0; i < 20; i++) {
  const u = await new PgUsersRepo(t.handle.db).insert({ username: `o${i}`, passwordHash: 'x', quota: 1e12, createdAt: 1, updatedAt: 1 });
  const k = await new PgApiKeysRepo(t.handle.db).insert({ userId: u.id, keyHash: `ko${i}`, prefix: 'p', createdAt: 1, updatedAt: 1 });
  users.push({ userId: u.id, keyId: k.id });
}
const gc = new PgGroupCommitter(pool.db, {});
let seq = 0;
const row = (): SettlementRow => {
  const w = users[seq % users.length]!;
  return {
    requestId: `o-${++seq}`, kind: 'messages', userId: w.userId, apiKeyId: w.keyId, channelId: null, model: 'm', upstreamModel: 'm', stream: false,
    inputTokens: 1, outputTokens: 1, cacheReadTokens: 0, cacheWriteTokens: 0, audioInputTokens: 0, audioOutputTokens: 0, cost: 10,
    latencyMs: 1, ttftMs: null, status: 200, errorCode: '', attempts: 1, ip: '', createdAt: 1,
  };
};

// Slowest commit past the database's return in the current cut (a settlement started later counts from its start).
let upAt = 0;
let worst = 0;
let failed = 0;
let flowing = true;
const all: Promise<unknown>[] = [];
const waiting = new Set<number>(); // start times of the settlements not yet answered
const feed = (async () => {
  while (flowing) {
    const t0 = performance.now();
    waiting.add(t0);
    all.push(gc.settle(row()).then(
      () => { if (upAt) worst = Math.max(worst, performance.now() - Math.max(t0, upAt)); },
      (err) => { failed++; console.log(`settlement failed: ${String(err).slice(0, 160)}`); },
    ).finally(() => waiting.delete(t0)));
    await Bun.sleep(Math.random() * 6);
  }
})();

const worsts: number[] = [];
for (let c = 0; c < CYCLES; c++) {
  await Bun.sleep(500 + Math.random() * 1_500);
  proxy.down();
  upAt = 0;
  await Bun.sleep(700 + Math.random() * 600);
  proxy.up();
  upAt = performance.now();
  worst = 0;
  await Bun.sleep(2_500);
  // One still waiting at the end of the window counts with its wait so far.
  const oldest = Math.min(...waiting);
  worsts.push(Number.isFinite(oldest) ? Math.max(worst, performance.now() - Math.max(oldest, upAt)) : worst);
}
flowing = false;
await feed;
await Promise.allSettled(all);

const [m] = await t.handle.sql<{ spent: string; charges: string; usage: string }[]>`
  select (select coalesce(sum(${1e12} - quota), 0) from users) as spent,
         (select count(*) from ledger where kind = 'charge') as charges,
         (select count(*) from usage_logs) as usage`;
const stalled = worsts.filter((w) => w > 2_000).length;
console.log(`${seq} settlements over ${CYCLES} cuts; failed ${failed}; stalled cuts (>2 s after the return) ${stalled}`);
console.log(`slowest commit after the return, per cut (ms): ${worsts.map((w) => w.toFixed(0)).join(' ')}`);
console.log(`books: charged ${Number(m!.spent)} (expected ${(seq - failed) * 10} at most ${seq * 10}), charges ${m!.charges}, usage rows ${m!.usage}`);
await pool.sql.end({ timeout: 0 }).catch(() => {});
proxy.stop();
await t.close();
