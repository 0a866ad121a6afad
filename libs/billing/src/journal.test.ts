import { afterEach, beforeEach, expect, test } from 'bun:test';
import { appendFileSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChangeBus } from '@gw/core';
import { LedgerRepo, PricesRepo, SettlementsRepo, UsersRepo, apiKeys, openDatabase, type DbHandle, type PriceRow } from '@gw/db';
import { SettlementJournal } from './journal';
import { PriceBook } from './price-book';
import { QuotaService } from './quota';

let dir: string;
let h: DbHandle;
let userId: number;
let keyId: number;
let priceRows: PriceRow[];

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'journal-'));
  h = openDatabase(join(dir, 'db.sqlite'), { checkpointMs: 0 });
  const users = new UsersRepo(h.db);
  userId = (await users.insert({ username: 'u', passwordHash: 'x', createdAt: 1, updatedAt: 1 })).id;
  await new LedgerRepo(h.db).apply({ userId, kind: 'topup', amount: 10_000, ref: 't', at: 1 });
  await new PricesRepo(h.db).upsert({ model: 'm', input: 1_000_000, output: 2_000_000, cacheRead: 0, cacheWrite: 0, updatedAt: 1 });
  priceRows = await new PricesRepo(h.db).all();
  keyId = h.db.insert(apiKeys).values({ userId, keyHash: 'h', prefix: 'sk-', createdAt: 1, updatedAt: 1 }).returning().get().id;
});
afterEach(async () => { h.close(); rmSync(dir, { recursive: true, force: true }); });

/** A QuotaService as a fresh process would build it on this database and journal folder. */
function boot(flushMs = 60_000, journaled = true, segmentBytes?: number, failing?: string): QuotaService {
  const bus = new ChangeBus();
  const prices = new PriceBook(new PricesRepo(h.db), bus, priceRows);
  const sink = new SettlementsRepo(h.sqlite);
  if (failing) {
    const apply = sink.apply.bind(sink);
    sink.apply = (r) => { if (r.requestId === failing) throw new Error('disk full'); return apply(r); };
  }
  return new QuotaService({ sink, prices, bus, journal: journaled ? new SettlementJournal(join(dir, 'journal'), segmentBytes) : null, flushMs });
}

/** Waits for the background unlink of sealed segments. */
async function segmentsSettle(want: string[]): Promise<string[]> {
  for (let i = 0; i < 100 && JSON.stringify(segments()) !== JSON.stringify(want); i++) await Bun.sleep(5);
  return segments();
}

const log = (requestId: string, input: number, output: number) => ({
  requestId, userId, apiKeyId: keyId, channelId: 1, model: 'm', upstreamModel: 'm', stream: false,
  usage: { input, output, cacheRead: 0, cacheWrite: 0 }, latencyMs: 1, ttftMs: 1, status: 200, errorCode: '', attempts: 1, ip: '',
});
/** Journal segments on disk (the folder also holds the owner's pid file). */
const segments = () => readdirSync(join(dir, 'journal')).filter((f) => f.endsWith('.jsonl'));
const rows = () => h.sqlite.query('select request_id, cost from usage_logs order by request_id').all();
const quota = () => (h.sqlite.query('select quota from users where id = ?').get(userId) as any).quota;

test('recorded settlements count as spent before they are written, and are written once', async () => {
  const q = boot();
  const r = q.reserveLocal({ userId, apiKey: { id: keyId, unlimitedQuota: true, remainQuota: 0 }, amount: 100, ref: 'a' });
  expect(q.record(r, log('a', 10, 5))).toBe(20);
  expect(rows()).toEqual([]);
  // Not yet in the table, but no longer spendable: reservation released, charge pending.
  expect(q.available(userId)).toBe(10_000 - 20);
  q.flush();
  expect(rows()).toEqual([{ request_id: 'a', cost: 20 }]);
  expect(quota()).toBe(10_000 - 20);
  expect(q.available(userId)).toBe(10_000 - 20);
  // The segment stays open for the next batches (its committed rows replay as no-ops); shutdown removes it.
  expect(segments()).toEqual(['settle-1.jsonl']);
  q.close();
  expect(segments()).toEqual([]);
});

test('one segment serves many batches; a full one is sealed at the next flush and deleted once that batch committed', async () => {
  const q = boot(60_000, true, 1000);
  q.record(null, log('s1', 10, 0));
  q.flush();
  q.record(null, log('s2', 10, 0));
  q.flush();
  expect(segments()).toEqual(['settle-1.jsonl']);
  for (let i = 0; i < 4; i++) q.record(null, log(`s3-${i}`, 10, 0)); // past 1000 bytes
  q.flush();
  expect(await segmentsSettle([])).toEqual([]);
  q.record(null, log('s4', 10, 0));
  expect(segments()).toEqual(['settle-2.jsonl']);
  q.flush();
  expect((rows() as unknown[]).length).toBe(7);
  expect(quota()).toBe(10_000 - 70);
});

test('a kill after some batches of a kept segment committed: the restart charges the rest, the committed ones not again', async () => {
  const first = boot();
  first.record(null, log('c1', 10, 0));
  first.flush();
  first.record(null, log('c2', 20, 0));
  // killed here: c1 committed, c2 only journaled, both in settle-1
  boot();
  expect(rows()).toEqual([{ request_id: 'c1', cost: 10 }, { request_id: 'c2', cost: 20 }]);
  expect(quota()).toBe(10_000 - 30);
  expect(await new LedgerRepo(h.db).sum(userId)).toBe(10_000 - 30);
  expect(segments()).toEqual([]);
});

test('a settlement that failed for good ("nothing charged") is never replayed later: its segment goes at once', async () => {
  const q = boot(60_000, true, undefined, 'bad-1');
  q.record(null, log('ok-1', 10, 0));
  // Its write fails for good (this process's sink throws on it); the others of the batch still commit.
  const failed = q.settleAsync(null, log('bad-1', 10, 0));
  q.flush();
  await expect(failed).rejects.toThrow('disk full');
  expect(await segmentsSettle([])).toEqual([]);
  boot(); // a later restart finds nothing to replay
  expect(rows()).toEqual([{ request_id: 'ok-1', cost: 10 }]);
  expect(quota()).toBe(10_000 - 10);
});

test('a restart replays what a killed process journaled, skips a torn last line, and never charges twice', async () => {
  const first = boot();
  first.record(null, log('k1', 10, 0));
  first.record(null, log('k2', 0, 10));
  // The kill landed mid-write: a torn line that no one was ever told was recorded.
  const [segment] = segments();
  appendFileSync(join(dir, 'journal', segment!), '{"requestId":"k3","ki');
  // k1 also reached the table before the kill (e.g. a flush was under way): replay must not charge it again.
  boot(60_000, false).settle(null, log('k1', 10, 0));
  expect(quota()).toBe(10_000 - 10);

  boot(); // the next process
  expect(rows()).toEqual([{ request_id: 'k1', cost: 10 }, { request_id: 'k2', cost: 20 }]);
  expect(quota()).toBe(10_000 - 30);
  expect(await new LedgerRepo(h.db).sum(userId)).toBe(10_000 - 30);
  expect(segments()).toEqual([]);
  boot();
  expect(quota()).toBe(10_000 - 30);
});
