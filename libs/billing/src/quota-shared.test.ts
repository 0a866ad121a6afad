/**
 * QuotaService admitting through a shared hold store (the PostgreSQL mode's Redis holds, here the
 * in-process MemoryHoldStore that passes the same contract): the refusals keep QuotaService's errors,
 * a store that cannot vouch for its holds answers 503, settlement caps by the hold and releases it
 * only after the commit, with the balance the commit read back.
 */
import { afterEach, describe, expect, test } from 'bun:test';
import { ChangeBus, GatewayError } from '@gw/core';
import type { AsyncSettlementSink, CheckpointStore, PriceRow, SettleOutcome, SettlementRow } from '@gw/db';
import { LiveHolds } from './holds/live-holds';
import { MemoryHoldStore } from './holds/memory';
import type { HoldStore, Mirror } from './holds/port';
import type { PriceBook } from './price-book';
import { QuotaService, type UsageLogInput } from './quota';
import { BudgetBook } from './budgets/book';
import { periodKey } from './budgets/period';
import { clearOfUtcDayEnd } from '../../../tests/helpers/window-edge';

/** One quota unit per input token. */
const PRICE = { model: 'm', input: 1_000_000, output: 0, cacheRead: 0, cacheWrite: 0, cacheWrite1h: null, longContextThreshold: null, longContext: null } as unknown as PriceRow;
const prices = { get: () => PRICE, webSearchPrice: () => 0 } as unknown as PriceBook;
const log = (requestId: string, input: number): UsageLogInput => ({
  requestId, userId: 1, apiKeyId: 7, channelId: 1, model: 'm', upstreamModel: 'm', stream: false, usage: { input, output: 0, cacheRead: 0, cacheWrite: 0 },
  latencyMs: 5, ttftMs: 5, status: 200, errorCode: '', attempts: 1, ip: '',
});

/** The ledger double: one user (id 1) and one limited key (id 7), committed when the test says so. */
class Ledger implements AsyncSettlementSink {
  user: Mirror = { balance: 1_000, version: 1 };
  key: Mirror = { balance: 600, version: 1 };
  gate: Promise<void> = Promise.resolve();
  rows: SettlementRow[] = [];
  async balances() { return [{ id: 1, quota: this.user.balance }]; }
  async balance() { return this.user.balance; }
  async settle(row: SettlementRow): Promise<SettleOutcome> {
    await this.gate;
    this.rows.push(row);
    this.user = { balance: this.user.balance - row.cost, version: this.user.version + 1 };
    this.key = { balance: this.key.balance - row.cost, version: this.key.version + 1 };
    return { inserted: true, balance: this.user.balance, mirror: { user: { ...this.user }, key: { ...this.key } } };
  }
}

const live: LiveHolds[] = [];
afterEach(() => { for (const l of live.splice(0)) l.close(); });

async function setup(store?: HoldStore, checkpoints?: CheckpointStore) {
  const ledger = new Ledger();
  const holds = store ?? new MemoryHoldStore(async () => ({ user: { ...ledger.user }, key: { ...ledger.key } }));
  const l = new LiveHolds(holds, 30_000);
  live.push(l);
  const q = await QuotaService.openDurable({ durable: ledger, holds: { store: holds, live: l, leaseMs: 30_000 }, checkpoints, prices, bus: new ChangeBus() });
  return { ledger, holds, live: l, q };
}

const unlimited = { id: 7, unlimitedQuota: true, remainQuota: 0 };
const limited = { id: 7, unlimitedQuota: false, remainQuota: 600 };

describe('QuotaService with shared holds', () => {
  test('reserve() answers with a promise; refusals are the same 402 errors as in one process', async () => {
    const { q, live } = await setup();
    const a = q.reserve({ userId: 1, apiKey: unlimited, amount: 700, ref: 'a' });
    expect(a).toBeInstanceOf(Promise);
    expect((await a).amount).toBe(700);
    expect(live.size).toBe(1);
    // This process's view counts its own shared holds too (realtime's local admission reads it).
    expect(q.available(1)).toBe(300);
    const short = await Promise.resolve(q.reserve({ userId: 1, apiKey: unlimited, amount: 301, ref: 'b' })).catch((e) => e);
    expect(short).toBeInstanceOf(GatewayError);
    expect([short.status, short.code, short.message]).toEqual([402, 'quota_exhausted', 'Insufficient balance: this request may cost up to 301 quota units, 300 available']);
    const rich = await setup();
    rich.ledger.user = { balance: 10_000, version: 1 };
    await rich.q.reserve({ userId: 1, apiKey: limited, amount: 350, ref: 'c' });
    const key = await Promise.resolve(rich.q.reserve({ userId: 1, apiKey: limited, amount: 251, ref: 'd' })).catch((e) => e);
    expect([key.status, key.code, key.message]).toEqual([402, 'key_quota_exhausted', 'API key quota exhausted: this request may cost up to 251 quota units, 250 left on the key']);
  });

  test('a store that cannot vouch for its holds: 503 overloaded_error with retry-after, nothing admitted', async () => {
    const store = new MemoryHoldStore(async () => ({ user: null, key: null }));
    store.reserve = async () => ({ ok: false, reason: 'unavailable', retryAfterMs: 2_500 });
    const { q } = await setup(store);
    const e = await Promise.resolve(q.reserve({ userId: 1, apiKey: unlimited, amount: 1, ref: 'x' })).catch((x) => x);
    expect([e.status, e.type, e.code, e.headers['retry-after']]).toEqual([503, 'overloaded_error', 'quota_unavailable', '3']);
    store.reserve = async () => { throw new Error('connection lost'); };
    const down = await Promise.resolve(q.reserve({ userId: 1, apiKey: unlimited, amount: 1, ref: 'y' })).catch((x) => x);
    expect([down.status, down.code, down.headers['retry-after']]).toEqual([503, 'quota_unavailable', '1']);
  });

  test('settlement: capped by the hold plus what is left, the hold counts until the commit, then goes with the committed mirror', async () => {
    const { q, ledger, holds, live } = await setup();
    const a = await q.reserve({ userId: 1, apiKey: limited, amount: 100, ref: 'a' });
    const b = await q.reserve({ userId: 1, apiKey: limited, amount: 100, ref: 'b' });
    let open!: () => void;
    ledger.gate = new Promise((ok) => { open = ok; });
    // The upstream reported 900 input tokens for `a`: capped at its 100 + the key's 400 left besides b's hold.
    const done = q.finish(a, log('a', 900)) as Promise<{ cost: number }>;
    await Bun.sleep(5);
    expect(await holds.available({ userId: 1, keyId: 7 })).toEqual({ user: 1_000 - 500 - 100, key: 600 - 500 - 100 });
    open();
    expect((await done).cost).toBe(500);
    expect(ledger.rows[0]!.usageFlag).toContain('capped');
    // Released with the mirrors the commit read back: 500 spent, b's 100 still held.
    expect(await holds.available({ userId: 1, keyId: 7 })).toEqual({ user: 500 - 100, key: 100 - 100 });
    expect(live.size).toBe(1);
    q.release(b);
    await Bun.sleep(1);
    expect(await holds.available({ userId: 1, keyId: 7 })).toEqual({ user: 500, key: 100 });
    expect(live.size).toBe(0);
  });

  test('a cost above its hold while the store is unreachable: capped at the hold (the only amount set aside on every node), flagged', async () => {
    const { q, ledger, holds } = await setup();
    ledger.user = { balance: 10_000, version: 1 };
    const a = await q.reserve({ userId: 1, apiKey: unlimited, amount: 100, ref: 'a' });
    holds.settle = () => Promise.reject(new Error('Redis connection lost (test)'));
    // This process alone would see 9,900 more to spend; other nodes' holds are invisible to it.
    expect(((await q.finish(a, log('a', 900))) as { cost: number }).cost).toBe(100);
    expect(ledger.rows[0]!.cost).toBe(100);
    expect(ledger.rows[0]!.usageFlag).toContain('capped');
    // Within its hold a cost needs no round trip, so an unreachable store changes nothing there.
    const b = await q.reserve({ userId: 1, apiKey: unlimited, amount: 100, ref: 'b' });
    expect(((await q.finish(b, log('b', 60))) as { cost: number }).cost).toBe(60);
  });

  test('a renewal sent right after a release does not bring the released hold back', async () => {
    const { q, holds, live } = await setup();
    const r = await q.reserve({ userId: 1, apiKey: unlimited, amount: 100, ref: 'a' });
    q.release(r);
    // Renewals re-register holds the store lost; this one must no longer carry the released hold.
    expect(await live.renewNow()).toBe(0);
    await Bun.sleep(1);
    expect(await holds.available({ userId: 1 })).toEqual({ user: 1_000, key: null });
  });

  test('a release lost in a blip is retried until it lands; after close() the retries stop', async () => {
    const { q, holds } = await setup();
    const release = holds.release.bind(holds);
    let tries = 0;
    let failing = true;
    holds.release = (...args: Parameters<HoldStore['release']>) => { tries++; return failing ? Promise.reject(new Error('Redis connection lost (test)')) : release(...args); };
    q.release(await q.reserve({ userId: 1, apiKey: unlimited, amount: 100, ref: 'a' }));
    await Bun.sleep(250);
    expect(tries).toBeGreaterThan(1);
    failing = false;
    await Bun.sleep(500);
    expect(await holds.available({ userId: 1 })).toEqual({ user: 1_000, key: null });
    // Another one failing for good: closing the service (shutdown) ends its retries instead of running out the lease.
    failing = true;
    q.release(await q.reserve({ userId: 1, apiKey: unlimited, amount: 100, ref: 'b' }));
    await Bun.sleep(150);
    q.close();
    const atClose = tries;
    await Bun.sleep(700);
    expect(tries).toBeLessThanOrEqual(atClose + 1);
  });

  test('a commit that failed leaves the hold counted (for the reconciler), no longer renewed by this node', async () => {
    const { q, ledger, holds, live } = await setup();
    const a = await q.reserve({ userId: 1, apiKey: unlimited, amount: 100, ref: 'a' });
    ledger.settle = async () => { throw new Error('database unreachable'); };
    await expect(q.finish(a, log('a', 50)) as Promise<unknown>).rejects.toThrow('database unreachable');
    expect(live.size).toBe(0);
    // Still counted at its worst case (100): a cost within its hold is not turned into the charge first.
    expect(await holds.available({ userId: 1 })).toEqual({ user: 900, key: null });
  });

  test('affords() holds nothing: two checks at once for 700 of 1,000 both pass (two holds would refuse one); short is the 402', async () => {
    const { q, holds } = await setup();
    // The first use loads the mirror with a hold of nothing, so neither check sees the other's amount.
    await Promise.all([q.affords({ userId: 1, apiKey: unlimited, amount: 700, ref: 'c1' }), q.affords({ userId: 1, apiKey: unlimited, amount: 700, ref: 'c2' })]);
    expect(await holds.available({ userId: 1 })).toEqual({ user: 1_000, key: null });
    await expect(Promise.resolve(q.affords({ userId: 1, apiKey: unlimited, amount: 1_001, ref: 'c3' }))).rejects.toMatchObject({ status: 402, code: 'quota_exhausted' });
    await expect(Promise.resolve(q.affords({ userId: 1, apiKey: limited, amount: 601, ref: 'c4' }))).rejects.toMatchObject({ status: 402, code: 'key_quota_exhausted' });
    // A real hold does count against a later check.
    const r = await q.reserve({ userId: 1, apiKey: unlimited, amount: 500, ref: 'h' });
    await expect(Promise.resolve(q.affords({ userId: 1, apiKey: unlimited, amount: 501, ref: 'c5' }))).rejects.toMatchObject({ status: 402 });
    q.release(r);
  });

  test('a charge settled without a hold (realtime: a response never announced; a reservation already released) installs the mirror it committed', async () => {
    const { q, holds } = await setup();
    // Mirrors loaded by an earlier admission of this user and key.
    q.release(await q.reserve({ userId: 1, apiKey: limited, amount: 1, ref: 'warm' }));
    await Bun.sleep(1);
    expect(await holds.available({ userId: 1, keyId: 7 })).toEqual({ user: 1_000, key: 600 });
    expect((await q.settleNow(null, log('n', 300))).cost).toBe(300);
    // Spent in the ledger, so spent for every node's next admission too (was: still 1,000 / 600 here).
    expect(await holds.available({ userId: 1, keyId: 7 })).toEqual({ user: 700, key: 300 });
    const late = await q.reserve({ userId: 1, apiKey: limited, amount: 100, ref: 'late' });
    q.release(late);
    await Bun.sleep(1);
    expect((await q.settleNow(late, log('late', 200))).cost).toBe(200);
    expect(await holds.available({ userId: 1, keyId: 7 })).toEqual({ user: 500, key: 100 });
  });

  test('a key made limited while its request runs: the key balance committed is installed though the hold had no key', async () => {
    const { q, ledger, holds } = await setup();
    const a = await q.reserve({ userId: 1, apiKey: unlimited, amount: 400, ref: 'a' });
    // The key is edited to limited (600 left); a request admitted after the edit loads the key's mirror.
    q.release(await q.reserve({ userId: 1, apiKey: limited, amount: 1, ref: 'b' }));
    await Bun.sleep(1);
    expect((await holds.available({ userId: 1, keyId: 7 })).key).toBe(600);
    // The ledger takes a's cost off the now limited key (its CASE reads the key at commit).
    expect(((await q.finish(a, log('a', 400))) as { cost: number }).cost).toBe(400);
    expect(ledger.key).toEqual({ balance: 200, version: 2 });
    // Was 600: a second request for 600 would have been admitted on a key with 200 left.
    expect(await holds.available({ userId: 1, keyId: 7 })).toEqual({ user: 600, key: 200 });
    await expect(Promise.resolve(q.reserve({ userId: 1, apiKey: limited, amount: 201, ref: 'c' }))).rejects.toMatchObject({ status: 402, code: 'key_quota_exhausted' });
  });

  test('budgets are admitted through the shared store with the balance; affords() checks them too, holding nothing', async () => {
    const ledger = Object.assign(new Ledger(), { useBudgets() {} });
    ledger.user = { balance: 1_000_000, version: 1 };
    // The budget row and the store's usage are of today's period, read on the real clock: all in one UTC day.
    await clearOfUtcDayEnd(2_000);
    const pk = periodKey('daily', Date.now());
    const book = new BudgetBook({
      repo: { all: () => [{ id: 3, scope: 'key', subjectId: 7, period: 'daily', limitAmount: 1_000, periodKey: pk, spent: 0, alerted: 0, createdAt: 1, updatedAt: 1 }], lowBalanceAll: () => [] },
      deliver: false,
    });
    const holds = new MemoryHoldStore(async () => ({ user: { ...ledger.user }, key: null }), Date.now, async (ids) => ids.map((id) => ({ id, periodKey: pk, spent: 0 })));
    const l = new LiveHolds(holds, 30_000);
    live.push(l);
    const q = await QuotaService.openDurable({ durable: ledger, holds: { store: holds, live: l, leaseMs: 30_000 }, prices, bus: new ChangeBus(), budgets: book });
    await q.reserve({ userId: 1, apiKey: unlimited, amount: 600, ref: 'b1' });
    const short = await Promise.resolve(q.reserve({ userId: 1, apiKey: unlimited, amount: 600, ref: 'b2' })).catch((e) => e);
    expect([short.status, short.code]).toEqual([402, 'key_budget_exceeded']);
    expect(short.headers['retry-after']).toMatch(/^\d+$/);
    const refused = await Promise.resolve(q.affords({ userId: 1, apiKey: unlimited, amount: 401, ref: 'b3' })).catch((e) => e);
    expect([refused.status, refused.code]).toEqual([402, 'key_budget_exceeded']);
    await q.affords({ userId: 1, apiKey: unlimited, amount: 400, ref: 'b4' });
    expect(await holds.budgetUsage(1, 3)).toEqual({ periodKey: pk, spent: 0, held: 600 });
  });
});

describe('QuotaService with shared holds: checkpoints of running requests', () => {
  /** A checkpoint store that records what it was asked, in order. */
  const recorder = () => {
    const calls: string[] = [];
    const store: CheckpointStore = { put: (row, ref) => { calls.push(`put ${row.requestId} ${row.cost} ${row.usageFlag} ${ref}`); }, drop: (id) => { calls.push(`drop ${id}`); } };
    return { calls, store };
  };

  test('kept under the hold\'s ref, capped by it; dropped once the settlement committed, not before', async () => {
    const { calls, store } = recorder();
    const { q, ledger, holds } = await setup(undefined, store);
    expect(q.keepsUnfinished).toBe(true);
    const r = await q.reserve({ userId: 1, apiKey: unlimited, amount: 100, ref: 'rt_s#1' });
    q.checkpoint(r, log('rt_s_resp_1', 40));
    q.checkpoint(r, log('rt_s_resp_1', 250));
    let gate!: () => void;
    ledger.gate = new Promise((done) => { gate = done; });
    const settled = q.settleNow(r, log('rt_s_resp_1', 60));
    await Bun.sleep(5);
    // Not committed yet: the checkpoint stays.
    expect(calls).toEqual(['put rt_s_resp_1 40  rt_s#1', 'put rt_s_resp_1 100 capped rt_s#1']);
    gate();
    await settled;
    expect(calls.at(-1)).toBe('drop rt_s_resp_1');
    expect(await holds.available({ userId: 1 })).toEqual({ user: 940, key: null });
    // Released: nothing more is kept for it.
    q.checkpoint(r, log('rt_s_resp_1', 70));
    expect(calls).toHaveLength(3);
  });

  test('a settlement that failed keeps its checkpoint (the leader bills it once the hold lapses, unless it committed)', async () => {
    const { calls, store } = recorder();
    const { q, ledger } = await setup(undefined, store);
    const r = await q.reserve({ userId: 1, apiKey: unlimited, amount: 100, ref: 'rt_f#1' });
    q.checkpoint(r, log('rt_f_resp_1', 40));
    ledger.gate = Promise.reject(Object.assign(new Error('unreachable'), { code: 'settlement_unavailable' }));
    expect(await Promise.resolve(q.settleNow(r, log('rt_f_resp_1', 60))).catch((e) => e.code)).toBe('settlement_unavailable');
    expect(calls).toEqual(['put rt_f_resp_1 40  rt_f#1']);
  });

  test('no store: nothing kept, and the port leaves checkpoints out', async () => {
    const { q } = await setup();
    expect(q.keepsUnfinished).toBe(false);
  });
});
