/**
 * `bun run bench/pg-settle.ts`: latency of one settlement through PgGroupCommitter (queued, batched,
 * resolved after COMMIT) at concurrency 1, 16 and 64, against one settlement per transaction for
 * comparison; GW_TEST_PG (default the local server), throwaway schema. `hot`: every worker settles for
 * one user; `spread`: 64 users. 3 s phases after a warm-up. Also prints the mean batch size.
 */
import { openPgTestDb } from '../tests/helpers/postgres';
import { PgApiKeysRepo, PgSettlementsRepo, PgUsersRepo } from '../libs/db/src/repos-pg';
import { PgGroupCommitter } from '../libs/db/src/pg/group-commit';
import type { SettlementRow } from '../libs/db/src/repos/settlements';

const MS = Number(process.env.BENCH_MS ?? 3000);
const t = await openPgTestDb('gw_bench_gc', { max: 16 });
const db = t.handle.db;
const who: Array<{ userId: number; keyId: number }> = [];
for (let i = 0; i < 64; i++) {
  const u = await new PgUsersRepo(db).insert({ username: `b${i}`, passwordHash: 'x', quota: 1e15, createdAt: 1, updatedAt: 1 });
  const k = await new PgApiKeysRepo(db).insert({ userId: u.id, keyHash: `kb${i}`, prefix: 'p', createdAt: 1, updatedAt: 1 });
  who.push({ userId: u.id, keyId: k.id });
}
let seq = 0;
const row = (spread: boolean): SettlementRow => {
  const w = who[spread ? seq % who.length : 0]!;
  return {
    requestId: `b-${++seq}`, kind: 'messages', userId: w.userId, apiKeyId: w.keyId, channelId: 1, model: 'm', upstreamModel: 'm', stream: false,
    inputTokens: 10, outputTokens: 20, cacheReadTokens: 0, cacheWriteTokens: 0, audioInputTokens: 0, audioOutputTokens: 0, cost: 7,
    latencyMs: 1, ttftMs: 1, status: 200, errorCode: '', attempts: 1, ip: '', createdAt: 1,
  };
};
let batches = 0;
let batched = 0;
const gc = new PgGroupCommitter(db, { onBatch: (b) => { batches++; batched += b.rows; } });
const single = new PgSettlementsRepo(db);

async function phase(name: string, conc: number, op: () => Promise<unknown>) {
  const lat: number[] = [];
  batches = batched = 0;
  const end = performance.now() + MS;
  await Promise.all(Array.from({ length: conc }, async () => {
    while (performance.now() < end) {
      const t0 = performance.now();
      await op();
      lat.push(performance.now() - t0);
    }
  }));
  lat.sort((a, b) => a - b);
  const q = (p: number) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))]!.toFixed(2);
  const mean = batches ? `  batch ${(batched / batches).toFixed(1)}` : '';
  console.log(`${name.padEnd(34)} c=${String(conc).padEnd(3)} ${Math.round((lat.length * 1000) / MS)}/s  p50 ${q(0.5)} ms  p99 ${q(0.99)} ms${mean}`);
}

await phase('warm-up', 4, () => gc.settle(row(true)));
for (const spread of [false, true]) {
  for (const c of [1, 16, 64]) await phase(`group commit, ${spread ? 'spread' : 'hot'}`, c, () => gc.settle(row(spread)));
  for (const c of [1, 16]) await phase(`one tx per settlement, ${spread ? 'spread' : 'hot'}`, c, () => db.transaction((tx) => single.apply(row(spread), tx)));
}
await gc.close();
await t.close();
process.exit(0);
