/**
 * `bun run bench/settle-batch.ts [<checkout> ...]`: SettlementsRepo's batch write alone (SQLite, one transaction
 * per batch of BENCH_BATCH rows, default 32, about what 5 ms of flush window holds at 6,000 req/s), µs per row,
 * for this checkout and each other one given (e.g. a worktree of an earlier commit), interleaved round by round
 * on databases of their own. Rows alternate between BENCH_USERS users (1) and their keys, half of them limited.
 * Request ids are the gateway's own (time-ordered, so index inserts land at the B-tree's end as in production); the
 * databases checkpoint on a worker thread as the gateway's do, and a round is timed by the main thread's CPU time
 * (bench/lib/thread-cpu.ts), which leaves out the waits for a CPU that made wall-clock rounds vary by ±50% here.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { SettlementRow } from '@gw/db';
import { newRequestId } from '../libs/core/src/ids';
import { threadCpuMs } from './lib/thread-cpu';

const BATCH = Number(process.env.BENCH_BATCH ?? 32);
const USERS = Number(process.env.BENCH_USERS ?? 1);
const ROWS = Number(process.env.BENCH_ROWS ?? 60_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
async function target(checkout: string) {
  const { LedgerRepo, SettlementsRepo, UsersRepo, apiKeys, openDatabase } = await import(join(checkout, 'libs/db/src/index.ts'));
  const dir = mkdtempSync(join(tmpdir(), 'gw-sb-'));
  const h = openDatabase(join(dir, 'db.sqlite'));
  const users = new UsersRepo(h.db);
  const ids: Array<{ user: number; key: number }> = [];
  for (let i = 0; i < USERS; i++) {
    const user = (await users.insert({ username: `u${i}`, passwordHash: 'x', createdAt: 1, updatedAt: 1 })).id;
    await new LedgerRepo(h.db).apply({ userId: user, kind: 'topup', amount: 1e15, ref: `t${i}`, at: 1 });
    const key = h.db.insert(apiKeys).values({ userId: user, keyHash: `h${i}`, prefix: 'sk-', createdAt: 1, updatedAt: 1, unlimitedQuota: i % 2 === 0, remainQuota: 1e15 }).returning().get().id;
    ids.push({ user, key });
  }
  const sink = new SettlementsRepo(h.sqlite);
  let n = 0;
  const row = (): SettlementRow => {
    const { user, key } = ids[n++ % USERS]!;
    return { requestId: newRequestId(), kind: 'messages', userId: user, apiKeyId: key, channelId: null, model: 'm', upstreamModel: 'm', stream: false,
      inputTokens: 10, outputTokens: 20, cacheReadTokens: 0, cacheWriteTokens: 0, audioInputTokens: 0, audioOutputTokens: 0, cost: 330, latencyMs: 1, ttftMs: 1,
      status: 200, errorCode: '', attempts: 1, ip: '127.0.0.1', createdAt: Math.floor(Date.now() / 1000) };
  };
  const round = (rows: number) => {
    const batches: SettlementRow[][] = [];
    for (let i = 0; i < rows / BATCH; i++) batches.push(Array.from({ length: BATCH }, row));
    const t0 = threadCpuMs();
    for (const b of batches) sink.transaction(() => { for (const r of b) sink.apply(r); });
    return ((threadCpuMs() - t0) * 1000) / (batches.length * BATCH);
  };
  round(5_000); // warm-up
  return { checkout, round, results: [] as number[], close: () => { h.close(); rmSync(dir, { recursive: true, force: true }); } };
}

const targets = [];
for (const c of [resolve(import.meta.dir, '..'), ...process.argv.slice(2).map((d) => resolve(d))]) targets.push(await target(c));
for (let r = 0; r < ROUNDS; r++) {
  for (const t of r % 2 ? [...targets].reverse() : targets) t.results.push(t.round(ROWS / ROUNDS));
}
console.log(`SettlementsRepo batch write, batch ${BATCH}, ${USERS} user(s): main-thread CPU µs per row, median of ${ROUNDS} interleaved rounds [min–max]`);
const base = targets[0]!;
const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
for (const t of targets) {
  const xs = [...t.results].sort((a, b) => a - b);
  console.log(`  ${t.checkout}: ${med(xs).toFixed(2)} [${xs[0]!.toFixed(2)}–${xs.at(-1)!.toFixed(2)}]${t === base ? '' : `  (this checkout takes ${(med(base.results) / med(xs)).toFixed(2)}× its time)`}`);
  t.close();
}
