import { afterAll, expect, test } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase } from '../client';
import { ledger, usageLogs } from '../schema';
import { inlineHistoryListings, workerHistoryListings } from './history-reader';
import { LedgerRepo } from './ledger';
import { UsageLogsRepo } from './usage-logs';
import { UsageStatsRepo } from './usage-stats';

const dir = mkdtempSync(join(tmpdir(), 'gw-history-'));
const path = join(dir, 'h.db');
const h = openDatabase(path, { checkpointMs: 0 });
const inline = inlineHistoryListings({ usageLogs: new UsageLogsRepo(h.db), usageStats: new UsageStatsRepo(h.db), ledger: new LedgerRepo(h.db) });
const worker = workerHistoryListings(path, 10_000);
afterAll(async () => {
  await worker.close();
  h.close();
  rmSync(dir, { recursive: true, force: true });
});

const BIG = 2 ** 53 - 1;
const base = { kind: 'messages', userId: 7, apiKeyId: 70, model: 'm', status: 200 } as const;

test('rows cross the thread exactly: integers past 2^31 and 2^32, booleans, nulls, in the same order and totals', async () => {
  h.db.insert(usageLogs).values([
    { ...base, requestId: 'a', channelId: null, stream: true, longContext: true, inputTokens: 2 ** 31 + 5, outputTokens: 2 ** 40 + 1, cost: BIG, latencyMs: 0, ttftMs: null, createdAt: 4_000_000_000 },
    { ...base, requestId: 'b', channelId: 3_000_000_000, stream: false, longContext: false, cost: -(2 ** 33), ttftMs: 12, status: 599, errorCode: 'x', createdAt: 4_000_000_000 },
    { ...base, requestId: 'c', channelId: 1, createdAt: 1 },
  ]).run();
  h.db.insert(ledger).values([
    { userId: 7, kind: 'topup', amount: 4e15, balanceAfter: 4e15, ref: 'r1', actorId: null, createdAt: 5 },
    { userId: 7, kind: 'charge', amount: -(2 ** 35), balanceAfter: 4e15 - 2 ** 35, ref: 'r2', actorId: 2 ** 31, createdAt: 6 },
  ]).run();
  for (const f of [{ offset: 0, limit: 10 }, { offset: 1, limit: 1 }, { userId: 7, status: 599, offset: 0, limit: 5 }, { offset: 0, limit: 5, before: { createdAt: 4_000_000_000, id: 2 } }, { offset: 9, limit: 5 }]) {
    expect(await worker.logList(f)).toStrictEqual(await inline.logList(f));
  }
  const all = await worker.logList({ offset: 0, limit: 10 });
  expect(all.total).toBe(3);
  expect(all.items.map((r) => r.requestId)).toEqual(['b', 'a', 'c']);
  expect(all.items[1]).toMatchObject({ stream: true, longContext: true, channelId: null, ttftMs: null, inputTokens: 2 ** 31 + 5, outputTokens: 2 ** 40 + 1, cost: BIG });
  expect(all.items[0]).toMatchObject({ stream: false, channelId: 3_000_000_000, cost: -(2 ** 33) });
  for (const after of [null, { createdAt: 1, id: 3 }]) expect(await worker.exportPage({ userId: 7 }, after, 2)).toStrictEqual(await inline.exportPage({ userId: 7 }, after, 2));
  for (const f of [{ offset: 0, limit: 10 }, { userId: 7, kind: 'charge', offset: 0, limit: 1 }]) expect(await worker.ledgerList(f)).toStrictEqual(await inline.ledgerList(f));
  expect((await worker.ledgerList({ offset: 0, limit: 10 })).items.map((r) => r.amount)).toEqual([-(2 ** 35), 4e15]);
});

test('a row committed on the writing connection is in the next listing of the worker', async () => {
  for (let i = 0; i < 20; i++) {
    const before = (await worker.logList({ userId: 8, offset: 0, limit: 1 })).total;
    h.db.insert(usageLogs).values({ ...base, userId: 8, requestId: `ryw${i}`, createdAt: 100 + i }).run();
    const after = await worker.logList({ userId: 8, offset: 0, limit: 1 });
    expect(after.total).toBe(before + 1);
    expect(after.items[0]!.requestId).toBe(`ryw${i}`);
  }
});

test('a failing query rejects its own call only; the worker keeps serving', async () => {
  await expect(worker.ledgerList({ offset: -1, limit: 'x' as any })).rejects.toThrow(/history query failed/);
  expect((await worker.logList({ offset: 0, limit: 1 })).total).toBeGreaterThan(0);
});

test('a worker whose database will not open rejects its calls, and the next call tries again', async () => {
  const broken = workerHistoryListings(join(dir, "missing", "nothing.db"), 10_000);
  await expect(broken.logList({ offset: 0, limit: 1 })).rejects.toThrow(/history worker failed/);
  await expect(broken.ledgerList({ offset: 0, limit: 1 })).rejects.toThrow(/history worker failed/);
  await broken.close();
});

test('after close a call is refused at once (503), not posted to a thread that will never answer', async () => {
  const w = workerHistoryListings(path, 10_000);
  expect((await w.logList({ offset: 0, limit: 1 })).total).toBeGreaterThan(0);
  await w.close();
  const late = await Promise.race([w.ledgerList({ offset: 0, limit: 1 }).then(() => 'resolved', (e) => e), Bun.sleep(2000).then(() => 'hung')]);
  expect(late).toMatchObject({ status: 503, code: 'history_unavailable' });
  await w.close();
}, 10_000);
