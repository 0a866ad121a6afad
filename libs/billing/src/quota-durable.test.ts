/**
 * QuotaService over a durable (asynchronous) settlement sink, the PostgreSQL mode: the settle path
 * waits for the commit, the cost stays unspendable meanwhile, and balances follow what committed.
 * The end-to-end part runs on the real local PostgreSQL through PgGroupCommitter.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { ChangeBus } from '@gw/core';
import type { AsyncSettlementSink, PriceRow, SettleOutcome, SettlementRow } from '@gw/db';
import { PgApiKeysRepo, PgGroupCommitter, PgUsersRepo } from '@gw/db/pg';
import type { PriceBook } from './price-book';
import { QuotaService, type UsageLogInput } from './quota';
import { openPgTestDb, requirePg, type PgTestDb } from '../../../tests/helpers/postgres';

/** One quota unit per input token. */
const PRICE = { model: 'm', input: 1_000_000, output: 0, cacheRead: 0, cacheWrite: 0, cacheWrite1h: null, longContextThreshold: null, longContext: null } as unknown as PriceRow;
const prices = { get: () => PRICE, webSearchPrice: () => 0 } as unknown as PriceBook;
const log = (requestId: string, userId: number, apiKeyId: number, input: number): UsageLogInput => ({
  requestId, userId, apiKeyId, channelId: 1, model: 'm', upstreamModel: 'm', stream: false, usage: { input, output: 0, cacheRead: 0, cacheWrite: 0 },
  latencyMs: 5, ttftMs: 5, status: 200, errorCode: '', attempts: 1, ip: '',
});

/** A sink whose commits the test resolves or fails by hand. */
class HandSink implements AsyncSettlementSink {
  readonly pending: Array<{ row: SettlementRow; ok: (o: SettleOutcome) => void; fail: (e: unknown) => void }> = [];
  quota = new Map<number, number>([[1, 1_000]]);
  async balances() { return [...this.quota].map(([id, quota]) => ({ id, quota })); }
  async balance(id: number) { return this.quota.get(id); }
  settle(row: SettlementRow) { return new Promise<SettleOutcome>((ok, fail) => this.pending.push({ row, ok, fail })); }
}

describe('QuotaService with a durable sink', () => {
  const key = { id: 7, unlimitedQuota: false, remainQuota: 600 };

  test('finish() resolves only after the commit; the cost is held meanwhile, then the committed balance is installed', async () => {
    const sink = new HandSink();
    const bus = new ChangeBus();
    const seen: unknown[] = [];
    bus.on('balance.changed', (p) => { seen.push(p); });
    const q = await QuotaService.openDurable({ durable: sink, prices, bus });
    expect(q.available(1)).toBe(1_000);
    const r = q.reserveLocal({ userId: 1, apiKey: key, amount: 500, ref: 'a' });
    expect(q.available(1)).toBe(500);
    const p = q.finish(r, log('a', 1, 7, 120));
    expect(p).toBeInstanceOf(Promise);
    let resolved = false;
    void (p as Promise<unknown>).then(() => { resolved = true; });
    await Bun.sleep(5);
    // Reservation released, the settlement's cost pending: 1000 - 120.
    expect(resolved).toBe(false);
    expect(q.available(1)).toBe(880);
    expect(() => q.reserveLocal({ userId: 1, apiKey: key, amount: 481, ref: 'k' })).toThrow(/API key quota exhausted/); // 600 - 120 left on the key
    expect(sink.pending[0]!.row).toMatchObject({ requestId: 'a', cost: 120 });
    sink.pending[0]!.ok({ inserted: true, balance: 880 });
    expect(await p).toEqual({ cost: 120, duplicate: false });
    expect(q.balance(1)).toBe(880);
    expect(q.available(1)).toBe(880);
    expect(seen).toEqual([{ userId: 1, balance: 880 }]);
  });

  test('a duplicate charges nothing; a failed commit gives the pending cost back and rejects', async () => {
    const sink = new HandSink();
    const q = await QuotaService.openDurable({ durable: sink, prices, bus: new ChangeBus() });
    const dup = q.finish(null, log('d', 1, 7, 50)) as Promise<unknown>;
    await Bun.sleep(1);
    sink.pending[0]!.ok({ inserted: false });
    expect(await dup).toEqual({ cost: 0, duplicate: true });
    expect(q.available(1)).toBe(1_000);
    const r = q.reserveLocal({ userId: 1, apiKey: key, amount: 300, ref: 'f' });
    const failed = q.finish(r, log('f', 1, 7, 200)) as Promise<unknown>;
    await Bun.sleep(1);
    expect(q.available(1)).toBe(800);
    sink.quota.set(1, 990); // what the database says after the unknown outcome
    sink.pending[1]!.fail(new Error('database unreachable'));
    await expect(failed).rejects.toThrow('database unreachable');
    await Bun.sleep(5);
    expect(q.available(1)).toBe(990); // reloaded, not guessed
  });

  test('the synchronous entry points are refused, and so are a journal, or budgets without shared holds', async () => {
    const q = await QuotaService.openDurable({ durable: new HandSink(), prices, bus: new ChangeBus() });
    expect(() => q.settle(null, log('s', 1, 7, 1))).toThrow(/durable/);
    expect(() => q.record(null, log('s', 1, 7, 1))).toThrow(/durable/);
    expect(() => new QuotaService({ durable: new HandSink(), prices, bus: new ChangeBus(), journal: {} as never })).toThrow(/durable sink settles alone/);
    // Budgets admitted in one process only would be overspent by every other node: refused without the shared store.
    expect(() => new QuotaService({ durable: new HandSink(), prices, bus: new ChangeBus(), budgets: {} as never })).toThrow(/shared holds/);
  });

  test('a user created after start (heard of through user.changed) gets its balance loaded', async () => {
    const sink = new HandSink();
    const bus = new ChangeBus();
    const q = await QuotaService.openDurable({ durable: sink, prices, bus });
    expect(q.available(2)).toBe(0);
    sink.quota.set(2, 70);
    await bus.emit('user.changed', { userId: 2 });
    await Bun.sleep(5);
    expect(q.available(2)).toBe(70);
  });

  test('a change heard while a read is in flight: awaiting it means the re-read after that read is installed', async () => {
    // The read in flight began before the change committed: it answers the old balance. The writer awaiting the
    // change (a redeem) must not resume until the newer balance is in memory (it resumed at once and saw 0).
    const reads: Array<(q: number) => void> = [];
    const sink = new HandSink();
    sink.balance = (id: number) => new Promise<number | undefined>((ok) => { reads.push(ok); void id; });
    const bus = new ChangeBus();
    const q = await QuotaService.openDurable({ durable: sink, prices, bus });
    expect(q.balance(3)).toBe(0); // unknown: a read starts (a microtask later: asks of the same turn share it)
    await Bun.sleep(0);
    expect(reads).toHaveLength(1);
    let done = false;
    const changed = bus.emit('user.changed', { userId: 3 }).then(() => { done = true; });
    const twice = bus.emit('user.changed', { userId: 3 }); // a second change meanwhile shares the re-read
    reads[0]!(0);
    await Bun.sleep(1);
    expect(done).toBe(false);
    expect(reads).toHaveLength(2);
    reads[1]!(5_000);
    await Promise.all([changed, twice]);
    expect(q.balance(3)).toBe(5_000);
    expect(reads).toHaveLength(2);
  });
});

const available = await requirePg('libs/billing/src/quota-durable.test.ts');

describe.skipIf(!available)('QuotaService over PgGroupCommitter (real PostgreSQL)', () => {
  let t: PgTestDb;
  beforeAll(async () => { t = await openPgTestDb('gw_qdurable', { max: 4 }); });
  afterAll(async () => { await t?.close(); });

  test('200 concurrent requests for 20 users: memory = users.quota = opening - costs = -ledger charges; one usage row each', async () => {
    const h = t.handle;
    const users: Array<{ id: number; key: { id: number; unlimitedQuota: boolean; remainQuota: number } }> = [];
    for (let i = 0; i < 20; i++) {
      const u = await new PgUsersRepo(h.db).insert({ username: `qd${i}`, passwordHash: 'h', quota: 100_000, createdAt: 1, updatedAt: 1 });
      const k = await new PgApiKeysRepo(h.db).insert({ userId: u.id, keyHash: `qdk${i}`, prefix: 'p', unlimitedQuota: false, remainQuota: 50_000, createdAt: 1, updatedAt: 1 });
      users.push({ id: u.id, key: { id: k.id, unlimitedQuota: false, remainQuota: 50_000 } });
    }
    const gc = new PgGroupCommitter(h.db);
    const q = await QuotaService.openDurable({ durable: gc, prices, bus: new ChangeBus() });
    const costs = Array.from({ length: 200 }, (_, i) => 1 + ((i * 53) % 97));
    const out = await Promise.all(costs.map(async (cost, i) => {
      const u = users[i % 20]!;
      const r = q.reserveLocal({ userId: u.id, apiKey: u.key, amount: 200, ref: `qd-${i}` });
      return q.finish(r, log(`qd-${i}`, u.id, u.key.id, cost));
    }));
    expect(out.every((o) => typeof o === 'object' && o.cost > 0 && !o.duplicate)).toBe(true);
    // A repeat of every request id charges nothing.
    const again = await Promise.all(costs.map((cost, i) => q.finish(null, log(`qd-${i}`, users[i % 20]!.id, users[i % 20]!.key.id, cost))));
    expect(again.every((o) => typeof o === 'object' && o.duplicate && o.cost === 0)).toBe(true);
    const rows = await h.sql<{ id: number; quota: string; charged: string; usage: string; remain: string }[]>`
      select u.id, u.quota,
        (select -sum(amount) from ledger l where l.user_id = u.id and l.kind = 'charge') as charged,
        (select count(*) from usage_logs g where g.user_id = u.id) as usage,
        (select remain_quota from api_keys k where k.user_id = u.id) as remain
      from users u order by u.id`;
    for (const [n, u] of users.entries()) {
      const spent = costs.filter((_, i) => i % 20 === n).reduce((s, c) => s + c, 0);
      const row = rows.find((x) => Number(x.id) === u.id)!;
      expect(Number(row.quota)).toBe(100_000 - spent);
      expect(Number(row.charged)).toBe(spent);
      expect(Number(row.usage)).toBe(10);
      expect(Number(row.remain)).toBe(50_000 - spent);
      expect(q.balance(u.id)).toBe(100_000 - spent);
      expect(q.available(u.id)).toBe(100_000 - spent);
    }
    await gc.close();
  });
});

describe('PG_SETTLE_* settings', () => {
  test('defaults 0 ms (an idle committer writes at once) / 256 rows / 15 s; read from the environment; a bad value is refused', async () => {
    const { billingConfig } = await import('./config');
    expect(billingConfig({}).pgSettle).toEqual({ maxDelayMs: 0, maxBatch: 256, retryDeadlineMs: 15_000 });
    expect(billingConfig({ PG_SETTLE_FLUSH_MS: '3', PG_SETTLE_BATCH: '64', PG_SETTLE_DEADLINE_MS: '500' }).pgSettle)
      .toEqual({ maxDelayMs: 3, maxBatch: 64, retryDeadlineMs: 500 });
    expect(() => billingConfig({ PG_SETTLE_BATCH: '0' })).toThrow(/PG_SETTLE_BATCH/);
    expect(() => billingConfig({ PG_SETTLE_FLUSH_MS: 'soon' })).toThrow(/PG_SETTLE_FLUSH_MS/);
  });
});
