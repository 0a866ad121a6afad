/**
 * `bun run bench/pg-repos.ts`: what the PostgreSQL repositories cost per call on this machine (GW_TEST_PG,
 * default the local server), in a throwaway schema: one settlement per transaction at concurrency 1 and 16,
 * 64 settlements per transaction (the group-commit shape), ledger.apply in its own transaction, a keyed read.
 */
import { openPgTestDb } from '../tests/helpers/postgres';
import { PgApiKeysRepo, PgLedgerRepo, PgSettlementsRepo, PgUsersRepo } from '../libs/db/src/repos-pg';
import type { SettlementRow } from '../libs/db/src/repos/settlements';

const t = await openPgTestDb('gw_bench', { max: 16 });
const db = t.handle.db;
const users = new PgUsersRepo(db);
const u = await users.insert({ username: 'bench', passwordHash: 'x', quota: 1e15, createdAt: 1, updatedAt: 1 });
const k = await new PgApiKeysRepo(db).insert({ userId: u.id, keyHash: 'kb', prefix: 'p', createdAt: 1, updatedAt: 1 });
const settlements = new PgSettlementsRepo(db);
const ledger = new PgLedgerRepo(db);
let seq = 0;
const row = (): SettlementRow => ({
  requestId: `b-${++seq}`, kind: 'messages', userId: u.id, apiKeyId: k.id, channelId: 1, model: 'm', upstreamModel: 'm', stream: false,
  inputTokens: 10, outputTokens: 20, cacheReadTokens: 0, cacheWriteTokens: 0, audioInputTokens: 0, audioOutputTokens: 0, cost: 7,
  latencyMs: 1, ttftMs: 1, status: 200, errorCode: '', attempts: 1, ip: '', createdAt: 1,
});

/** Runs `op` from `conc` workers for `ms`; ops/s and p50/p99 latency in ms. */
async function phase(name: string, conc: number, ms: number, op: () => Promise<unknown>, per = 1) {
  const lat: number[] = [];
  const end = performance.now() + ms;
  await Promise.all(Array.from({ length: conc }, async () => {
    while (performance.now() < end) {
      const t0 = performance.now();
      await op();
      lat.push(performance.now() - t0);
    }
  }));
  lat.sort((a, b) => a - b);
  const q = (p: number) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))]!.toFixed(2);
  console.log(`${name.padEnd(42)} c=${String(conc).padEnd(3)} ${Math.round((lat.length * per * 1000) / ms)}/s  p50 ${q(0.5)} ms  p99 ${q(0.99)} ms`);
}

await phase('warm-up', 4, 500, () => db.transaction((tx) => settlements.apply(row(), tx)));
await phase('settlement, one per transaction', 1, 2000, () => db.transaction((tx) => settlements.apply(row(), tx)));
await phase('settlement, one per transaction', 16, 2000, () => db.transaction((tx) => settlements.apply(row(), tx)));
await phase('settlements, 64 per transaction (rows/s)', 1, 2000, () => db.transaction(async (tx) => {
  for (let i = 0; i < 64; i++) await settlements.apply(row(), tx);
}), 64);
await phase('ledger.apply, own transaction', 1, 2000, () => ledger.apply({ userId: u.id, kind: 'adjust', amount: 1, ref: `l-${++seq}`, at: 1 }));
await phase('users.byId', 1, 1000, () => users.byId(u.id));
// The opening balance was set directly, so quota = 1e15 + sum(ledger) must hold after all of the above.
console.log('quota - 1e15 = sum(ledger):', (await users.byId(u.id))!.quota - 1e15 === (await ledger.sum(u.id)));
await t.close();
