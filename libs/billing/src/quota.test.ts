import { afterEach, beforeEach, describe, expect, test } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChangeBus, memoryLogger } from '@gw/core';
import { LedgerRepo, PricesRepo, RealtimeUnfinishedRepo, SettlementsRepo, UsersRepo, apiKeys, openDatabase, type DbHandle } from '@gw/db';
import { PriceBook } from './price-book';
import { QuotaService, costFor, type UsageLogInput } from './quota';

let dir: string;
let h: DbHandle;
let bus: ChangeBus;
let quota: QuotaService;
let book: PriceBook;
let ledger: LedgerRepo;
let userId: number;
const key = { id: 0, unlimitedQuota: false, remainQuota: 1000 };

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'quota-'));
  h = openDatabase(join(dir, 'db.sqlite'));
  bus = new ChangeBus();
  const users = new UsersRepo(h.db);
  ledger = new LedgerRepo(h.db, bus);
  book = await PriceBook.load(new PricesRepo(h.db), bus);
  quota = new QuotaService({ sink: new SettlementsRepo(h.sqlite), prices: book, bus });
  userId = (await users.insert({ username: 'u1', passwordHash: 'x', createdAt: 1, updatedAt: 1 })).id;
  await ledger.apply({ userId, kind: 'topup', amount: 500, ref: 't1', at: 1 });
  key.id = h.db.insert(apiKeys).values({ userId, keyHash: 'h', prefix: 'sk-', unlimitedQuota: false, remainQuota: 1000, createdAt: 1, updatedAt: 1 }).returning().get().id;
  await book.upsert({ model: 'm', input: 3_000_000, output: 15_000_000, cache_read: 300_000, cache_write: 3_750_000 });
});
afterEach(async () => { h.close(); rmSync(dir, { recursive: true, force: true }); });

const log = (requestId: string, usage: UsageLogInput['usage']): UsageLogInput => ({
  requestId, userId, apiKeyId: key.id, channelId: 1, model: 'm', upstreamModel: 'm', stream: false, usage,
  latencyMs: 5, ttftMs: 5, status: 200, errorCode: '', attempts: 1, ip: '',
});

describe('QuotaService', () => {
  test('in one process (SQLite) reserve() returns the reservation itself: no promise, no microtask on the hot path', () => {
    const r = quota.reserve({ userId, apiKey: key, amount: 100, ref: 'sync' });
    expect(r).not.toBeInstanceOf(Promise);
    expect(quota.available(userId)).toBe(400);
  });

  test('cost is exact per kind and rounded up once', async () => {
    const p = book.get('m')!;
    // 10*3 + 2*15 + 100*0.3 + 4*3.75 = 30 + 30 + 30 + 15 = 105 units
    expect(costFor({ input: 10, output: 2, cacheRead: 100, cacheWrite: 4 }, p)).toBe(105);
    expect(costFor({ input: 1, output: 0, cacheRead: 1, cacheWrite: 0 }, p)).toBe(4); // 3.3 -> 4
  });

  test('reservations hold balance: concurrent reserves cannot overspend', async () => {
    const a = quota.reserveLocal({ userId, apiKey: key, amount: 300, ref: 'a' });
    expect(() => quota.reserveLocal({ userId, apiKey: key, amount: 300, ref: 'b' })).toThrow(/Insufficient balance/);
    quota.release(a);
    quota.release(a); // idempotent
    expect(quota.available(userId)).toBe(500);
  });

  test('settle charges once: ledger, usage log, user and key counters in one go; repeat is a no-op', async () => {
    const r = quota.reserveLocal({ userId, apiKey: key, amount: 400, ref: 'r1' });
    const first = quota.settle(r, log('r1', { input: 10, output: 2, cacheRead: 100, cacheWrite: 4 }));
    expect(first).toEqual({ cost: 105, duplicate: false });
    const again = quota.settle(null, log('r1', { input: 10, output: 2, cacheRead: 100, cacheWrite: 4 }));
    expect(again).toEqual({ cost: 0, duplicate: true });
    expect(quota.balance(userId)).toBe(395);
    expect(quota.available(userId)).toBe(395);
    expect(await ledger.sum(userId)).toBe(395);
    const u = h.sqlite.query('select quota, used_quota, request_count from users where id = ?').get(userId) as any;
    expect(u).toEqual({ quota: 395, used_quota: 105, request_count: 1 });
    const k = h.sqlite.query('select used_quota, remain_quota from api_keys where id = ?').get(key.id) as any;
    expect(k).toEqual({ used_quota: 105, remain_quota: 895 });
    const rows = h.sqlite.query("select cost from usage_logs where request_id = 'r1'").all();
    expect(rows).toEqual([{ cost: 105 }]);
  });

  test('a cache that fails to refresh after a settlement is repaired like any committed write (onRefreshFailed)', async () => {
    // The key index re-reads a limited key's row after each charge, off the request path. When that read failed,
    // the failure was only logged: the key's cached remain_quota stayed stale until some later change.
    const repaired: string[] = [];
    bus.onRefreshFailed((event) => { repaired.push(event); });
    bus.on('apikey.changed', async () => { throw new Error('pool closed'); });
    const r = quota.reserveLocal({ userId, apiKey: key, amount: 400, ref: 'rf' });
    quota.settle(r, log('rf', { input: 10, output: 2, cacheRead: 0, cacheWrite: 0 }));
    await Bun.sleep(5);
    expect(repaired).toEqual(['apikey.changed']);
  });

  test('a failed transaction charges nothing and keeps nothing reserved', async () => {
    const r = quota.reserveLocal({ userId, apiKey: key, amount: 100, ref: 'r2' });
    // Unknown user: the ledger refuses inside the transaction, so the usage row rolls back too.
    expect(() => quota.settle(r, { ...log('r2', { input: 1000, output: 0, cacheRead: 0, cacheWrite: 0 }), userId: 9999 })).toThrow();
    expect(h.sqlite.query("select count(*) as n from usage_logs where request_id = 'r2'").get()).toEqual({ n: 0 });
    expect(quota.available(userId)).toBe(500);
  });

  test('key budget is enforced for limited keys', async () => {
    const small = { ...key, remainQuota: 50 };
    expect(() => quota.reserveLocal({ userId, apiKey: small, amount: 60, ref: 'k' })).toThrow(/API key quota/);
    expect(() => quota.reserveLocal({ userId, apiKey: { ...small, unlimitedQuota: true }, amount: 60, ref: 'k' })).not.toThrow();
  });

  test('settleAsync group-commits: one bad entry does not undo the others; a repeat is a no-op', async () => {
    const rs = ['g1', 'g2', 'g3'].map((ref) => quota.reserveLocal({ userId, apiKey: key, amount: 50, ref }));
    const out = await Promise.allSettled([
      quota.settleAsync(rs[0]!, log('g1', { input: 1, output: 1, cacheRead: 0, cacheWrite: 0 })),
      quota.settleAsync(rs[1]!, { ...log('g2', { input: 1, output: 1, cacheRead: 0, cacheWrite: 0 }), userId: 9999 }),
      quota.settleAsync(rs[2]!, log('g3', { input: 0, output: 2, cacheRead: 0, cacheWrite: 0 })),
      quota.settleAsync(null, log('g1', { input: 1, output: 1, cacheRead: 0, cacheWrite: 0 })),
    ]);
    expect(out.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
    expect((out[0] as any).value).toEqual({ cost: 18, duplicate: false });
    expect((out[2] as any).value).toEqual({ cost: 30, duplicate: false });
    expect((out[3] as any).value).toEqual({ cost: 0, duplicate: true });
    expect(quota.balance(userId)).toBe(500 - 48);
    expect(await ledger.sum(userId)).toBe(500 - 48);
    expect(quota.available(userId)).toBe(500 - 48);
    expect(h.sqlite.query("select request_id from usage_logs order by request_id").all()).toEqual([{ request_id: 'g1' }, { request_id: 'g3' }]);
  });

  test('a charge never exceeds its reservation plus what is left: capped, flagged, balance never below 0', async () => {
    const flag = (id: string) => (h.sqlite.query('select usage_flag as f, cost from usage_logs where request_id = ?').get(id) as any);
    const a = quota.reserveLocal({ userId, apiKey: { ...key, unlimitedQuota: true }, amount: 100, ref: 'a' });
    const b = quota.reserveLocal({ userId, apiKey: { ...key, unlimitedQuota: true }, amount: 100, ref: 'b' });
    // a reports 1M input tokens (3M units): capped at its 100 + the 300 nobody holds; b's hold is untouched.
    expect(quota.settle(a, log('a', { input: 1_000_000, output: 0, cacheRead: 0, cacheWrite: 0 })).cost).toBe(400);
    expect(flag('a')).toEqual({ f: 'capped', cost: 400 });
    expect(quota.settle(b, log('b', { input: 1_000_000, output: 0, cacheRead: 0, cacheWrite: 0 })).cost).toBe(100);
    // Unreserved (no hold): at most what is left, here nothing.
    expect(quota.settle(null, log('c', { input: 1_000_000, output: 0, cacheRead: 0, cacheWrite: 0 })).cost).toBe(0);
    expect(quota.balance(userId)).toBe(0);
    expect(await ledger.sum(userId)).toBe(0);
  });

  test('a limited key is capped by its remain_quota the same way', async () => {
    const k = { ...key, remainQuota: 50 };
    const r = quota.reserveLocal({ userId, apiKey: k, amount: 10, ref: 'k' });
    expect(quota.settle(r, log('k', { input: 1_000_000, output: 0, cacheRead: 0, cacheWrite: 0 })).cost).toBe(50);
  });

  test('a limited key is capped by what is left after charges committed since its reservation', async () => {
    const k = { ...key, remainQuota: 100 };
    const a = quota.reserveLocal({ userId, apiKey: k, amount: 10, ref: 'ka' });
    const b = quota.reserveLocal({ userId, apiKey: k, amount: 10, ref: 'kb' });
    // a is billed 60 and committed; b was reserved before that, against a budget of 100.
    expect(quota.settle(a, log('ka', { input: 20, output: 0, cacheRead: 0, cacheWrite: 0 })).cost).toBe(60);
    // b reports far more than is left: it may take only the 40 the key still has.
    expect(quota.settle(b, log('kb', { input: 1_000_000, output: 0, cacheRead: 0, cacheWrite: 0 })).cost).toBe(40);
    const remain = h.sqlite.query('select remain_quota from api_keys where id = ?').get(key.id) as { remain_quota: number };
    expect(remain.remain_quota).toBe(1000 - 100);
  });

  test('usage limits on the reservation: implausible counts are clamped, invalid ones replaced', async () => {
    const limits = { maxInput: 100, maxOutput: 10, input: 20 };
    const r = quota.reserveLocal({ userId, apiKey: key, amount: 300, ref: 'l', limits });
    quota.settle(r, log('l', { input: Number.NaN, output: 1e9, cacheRead: -1, cacheWrite: 0 }));
    const row = h.sqlite.query('select input_tokens, output_tokens, cache_read_tokens, usage_flag from usage_logs where request_id = ?').get('l');
    expect(row).toEqual({ input_tokens: 20, output_tokens: 10, cache_read_tokens: 0, usage_flag: 'invalid,implausible' });
  });
});

describe('QuotaService checkpoints (a request running when the process dies)', () => {
  const restart = (store = new RealtimeUnfinishedRepo(h.sqlite)) => new QuotaService({ sink: new SettlementsRepo(h.sqlite), prices: book, bus, unfinished: store });
  const rows = () => h.sqlite.query('select request_id, cost, usage_flag, error_code from usage_logs order by id').all();

  test('kept until settled; the next start bills what is left once, capped by the hold, and skips what was billed', () => {
    const store = new RealtimeUnfinishedRepo(h.sqlite);
    quota = restart(store);
    // Output at 15 units a token: 2 tokens cost 30; the second one's estimate (1,500 units) exceeds its hold.
    const a = quota.reserveLocal({ userId, apiKey: key, amount: 50, ref: 'a' });
    quota.checkpoint(a, { ...log('cp-a', { input: 0, output: 1 }), errorCode: 'gateway_crashed' });
    quota.checkpoint(a, { ...log('cp-a', { input: 0, output: 2 }), errorCode: 'gateway_crashed' });
    const b = quota.reserveLocal({ userId, apiKey: key, amount: 60, ref: 'b' });
    quota.checkpoint(b, { ...log('cp-b', { input: 0, output: 100 }), errorCode: 'gateway_crashed' });
    const c = quota.reserveLocal({ userId, apiKey: key, amount: 70, ref: 'c' });
    quota.checkpoint(c, log('cp-c', { input: 0, output: 1 }));
    quota.settle(c, log('cp-c', { input: 0, output: 3 }));
    // Gathered, not yet written (the next flush writes them together).
    expect(new RealtimeUnfinishedRepo(h.sqlite).all()).toEqual([]);
    expect(store.all().map((r) => r.requestId)).toEqual(['cp-a', 'cp-b']);
    // A checkpoint whose settlement was written but whose drop was lost (the kill came between the two).
    store.put({ ...store.all()[0]!, requestId: 'cp-c', cost: 70 });
    store.flush();
    // The process dies here: nothing settled a or b, and its holds die with it.
    quota = restart();
    expect(rows()).toEqual([
      { request_id: 'cp-c', cost: 45, usage_flag: '', error_code: '' },
      { request_id: 'cp-a', cost: 30, usage_flag: '', error_code: 'gateway_crashed' },
      { request_id: 'cp-b', cost: 60, usage_flag: 'capped', error_code: 'gateway_crashed' },
    ]);
    expect(store.all()).toEqual([]);
    expect(quota.available(userId)).toBe(500 - 45 - 30 - 60);
    // A further start bills nothing more.
    quota = restart();
    expect(rows()).toHaveLength(3);
  });

  test('odd rows left in the table (not JSON, null, not a settlement): skipped with a log line, the rest billed, the start goes on', () => {
    const store = new RealtimeUnfinishedRepo(h.sqlite);
    quota = restart(store);
    const a = quota.reserveLocal({ userId, apiKey: key, amount: 50, ref: 'a' });
    quota.checkpoint(a, { ...log('cp-good', { input: 0, output: 1 }), errorCode: 'gateway_crashed' });
    const odd = { 'cp-text': 'not json', 'cp-null': 'null', 'cp-array': '[1,2]', 'cp-negative': JSON.stringify({ ...store.all()[0]!, requestId: 'cp-negative', cost: -500 }) };
    for (const [id, row] of Object.entries(odd)) h.sqlite.run('INSERT INTO realtime_unfinished (request_id, row, updated_at) VALUES (?, ?, 0)', [id, row]);
    const { log: logger, lines } = memoryLogger({ format: 'json' });
    // Before: `null` threw out of the constructor (every start failed on it); text that is not JSON went unlogged.
    quota = new QuotaService({ sink: new SettlementsRepo(h.sqlite), prices: book, bus, unfinished: store, log: logger });
    expect(rows()).toEqual([{ request_id: 'cp-good', cost: 15, usage_flag: '', error_code: 'gateway_crashed' }]);
    expect(store.all()).toEqual([]);
    const skipped = lines.map((l) => JSON.parse(l)).filter((l) => l.event === 'settlement.unfinished_unreadable').map((l) => l.id).sort();
    expect(skipped).toEqual(Object.keys(odd).sort());
  });

  test('a checkpoint whose drop fails after its settlement was written: the settlement stands (not thrown as "nothing charged")', () => {
    const store = new RealtimeUnfinishedRepo(h.sqlite);
    const failing = Object.assign(Object.create(store), { drop: () => { throw new Error('disk I/O error'); } });
    const { log: logger, lines } = memoryLogger({ format: 'json' });
    quota = new QuotaService({ sink: new SettlementsRepo(h.sqlite), prices: book, bus, unfinished: failing, log: logger });
    const a = quota.reserveLocal({ userId, apiKey: key, amount: 50, ref: 'a' });
    quota.checkpoint(a, log('cp-d', { input: 0, output: 1 }));
    store.flush();
    expect(quota.settle(a, log('cp-d', { input: 0, output: 2 }))).toEqual({ cost: 30, duplicate: false });
    expect(lines.some((l) => l.includes('settlement.unfinished_drop_failed'))).toBe(true);
    // The row left behind is skipped at the next start: its request id is billed.
    quota = restart();
    expect(rows()).toEqual([{ request_id: 'cp-d', cost: 30, usage_flag: '', error_code: '' }]);
    expect(store.all()).toEqual([]);
  });

  test('checkpoints are written together within 50 ms; a drop before then writes nothing; close() writes what waits', async () => {
    const store = new RealtimeUnfinishedRepo(h.sqlite);
    quota = restart(store);
    const table = () => h.sqlite.query('select request_id from realtime_unfinished order by request_id').all().map((r: any) => r.request_id);
    const a = quota.reserveLocal({ userId, apiKey: key, amount: 50, ref: 'a' });
    const b = quota.reserveLocal({ userId, apiKey: key, amount: 50, ref: 'b' });
    quota.checkpoint(a, log('fl-a', { input: 0, output: 1 }));
    quota.checkpoint(b, log('fl-b', { input: 0, output: 1 }));
    quota.settle(b, log('fl-b', { input: 0, output: 1 }));
    expect(table()).toEqual([]);
    await Bun.sleep(120);
    expect(table()).toEqual(['fl-a']);
    const c = quota.reserveLocal({ userId, apiKey: key, amount: 50, ref: 'c' });
    quota.checkpoint(c, log('fl-c', { input: 0, output: 1 }));
    quota.close();
    expect(table()).toEqual(['fl-a', 'fl-c']);
    store.clear();
  });

  test('a failed write keeps its checkpoints and tries again (a stream that checkpoints no more is not lost)', async () => {
    const store = new RealtimeUnfinishedRepo(h.sqlite);
    quota = restart(store);
    const table = () => h.sqlite.query('select request_id from realtime_unfinished').all().map((r: any) => r.request_id);
    h.sqlite.run("create trigger test_refuse_checkpoint before insert on realtime_unfinished begin select raise(abort, 'disk full (test)'); end");
    try {
      const a = quota.reserveLocal({ userId, apiKey: key, amount: 50, ref: 'a' });
      quota.checkpoint(a, log('retry-a', { input: 0, output: 1 }));
      await Bun.sleep(150);
      expect(table()).toEqual([]);
    } finally {
      h.sqlite.run('drop trigger test_refuse_checkpoint');
    }
    await Bun.sleep(1_200);
    expect(table()).toEqual(['retry-a']);
    store.clear();
  });

  test('dropCheckpoint (a settlement that could not be recorded): the row goes, the next start bills nothing', () => {
    const store = new RealtimeUnfinishedRepo(h.sqlite);
    quota = restart(store);
    const a = quota.reserveLocal({ userId, apiKey: key, amount: 50, ref: 'a' });
    quota.checkpoint(a, log('forget-a', { input: 0, output: 1 }));
    store.flush();
    expect(store.all().map((r) => r.requestId)).toEqual(['forget-a']);
    quota.release(a);
    quota.dropCheckpoint('forget-a');
    expect(store.all()).toEqual([]);
    quota = restart();
    expect(rows().filter((r: any) => r.request_id === 'forget-a')).toEqual([]);
  });

  test('nothing is kept without a live hold, nor without a store', () => {
    const store = new RealtimeUnfinishedRepo(h.sqlite);
    const a = quota.reserveLocal({ userId, apiKey: key, amount: 50, ref: 'a' });
    quota.checkpoint(a, log('no-store', { input: 0, output: 100 }));
    quota = restart();
    quota.checkpoint(null, log('no-hold', { input: 0, output: 100 }));
    const r = quota.reserveLocal({ userId, apiKey: key, amount: 50, ref: 'r' });
    quota.release(r);
    quota.checkpoint(r, log('released', { input: 0, output: 100 }));
    expect(store.all()).toEqual([]);
  });
});
