import { describe, expect, test } from 'bun:test';
import { DELETED_KEYS_PER_QUERY } from '../repos/usage-logs';
import type { ContractRepos, MakeEnv } from './env';
import { BIG, seedKey, seedUser, useEnv } from './setup';

type NewUsage = Parameters<ContractRepos['usageLogs']['insertOnce']>[0];
type Settlement = Parameters<ContractRepos['settlements']['apply']>[0];

let seq = 0;
const usage = (over: Partial<NewUsage> & Pick<NewUsage, 'userId' | 'apiKeyId'>): NewUsage => ({
  requestId: `req-${++seq}`, model: 'm', status: 200, createdAt: 1_000, ...over,
});
const settlement = (over: Partial<Settlement> & Pick<Settlement, 'userId' | 'apiKeyId'>): Settlement => ({
  requestId: `set-${++seq}`, kind: 'messages', channelId: 3, model: 'm', upstreamModel: 'up-m', stream: true, inputTokens: 10,
  outputTokens: 20, cacheReadTokens: 1, cacheWriteTokens: 2, audioInputTokens: 0, audioOutputTokens: 0, cost: 100, latencyMs: 50,
  ttftMs: 5, status: 200, errorCode: '', attempts: 1, ip: '10.0.0.1', createdAt: 2_000, ...over,
});

/** The exact bin of the documented definition: bin k holds [2^((k-1)/8), 2^(k/8)) ms, i.e. 2^(k-1) <= x^8 < 2^k. */
const exactBin = (ms: number) => (ms < 1 ? 0 : (BigInt(ms) ** 8n).toString(2).length);

/** Ledger, usage rows, settlements, statistics, realtime session records. */
export function billingContract(make: MakeEnv): void {
  describe('ledger', () => {
    const env = useEnv(make);

    test('apply moves the balance and writes the row with balance_after; (kind, ref) applies once', async () => {
      const { repos: r, events } = env();
      const u = await seedUser(r);
      expect(await r.ledger.apply({ userId: u.id, kind: 'topup', amount: BIG, ref: 'o-1', note: 'stripe', at: 10 })).toBe(BIG);
      expect(await r.ledger.apply({ userId: u.id, kind: 'charge', amount: -BIG + 1, ref: 'o-1', at: 11 })).toBe(1);
      expect(await r.ledger.apply({ userId: u.id, kind: 'topup', amount: 500, ref: 'o-1', at: 12 })).toBeNull();
      expect(await r.users.byId(u.id)).toMatchObject({ quota: 1, updatedAt: 11 });
      const { items, total } = await r.ledger.list({ userId: u.id, offset: 0, limit: 10 });
      expect(total).toBe(2);
      expect(items.map(({ id: _, ...row }) => row)).toEqual([
        { userId: u.id, kind: 'charge', amount: -BIG + 1, balanceAfter: 1, ref: 'o-1', note: '', actorId: null, createdAt: 11 },
        { userId: u.id, kind: 'topup', amount: BIG, balanceAfter: BIG, ref: 'o-1', note: 'stripe', actorId: null, createdAt: 10 },
      ]);
      // Own transaction: one balance.changed per applied entry, none for the duplicate.
      expect(events.filter((e) => e.event === 'balance.changed').map((e) => plain(e.payload as object, 'version'))).toEqual([{ userId: u.id, balance: BIG }, { userId: u.id, balance: 1 }]);
    });

    test('apply for a missing user fails and writes nothing', async () => {
      const r = env().repos;
      await expect((async () => r.ledger.apply({ userId: 424242, kind: 'adjust', amount: 5, ref: 'x', at: 1 }))()).rejects.toThrow('no user 424242');
      expect((await r.ledger.list({ offset: 0, limit: 10 })).total).toBe(0);
    });

    test('sum is a number, exact beyond 2^32, equal to users.quota; 0 without rows', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const v = await seedUser(r);
      for (let i = 0; i < 3; i++) await r.ledger.apply({ userId: u.id, kind: 'topup', amount: 900_000_000_000_001, ref: `t${i}`, actorId: v.id, at: i });
      await r.ledger.apply({ userId: u.id, kind: 'adjust', amount: -7, ref: 'a', at: 9 });
      const s = await r.ledger.sum(u.id);
      expect(s).toBe(2_700_000_000_000_003 - 7);
      expect(typeof s).toBe('number');
      expect((await r.users.byId(u.id))!.quota).toBe(s);
      expect(await r.ledger.sum(v.id)).toBe(0);
      expect((await r.ledger.list({ userId: u.id, kind: 'topup', offset: 0, limit: 1 })).items[0]).toMatchObject({ ref: 't2', actorId: v.id });
    });

    test('list filters by user and kind, newest first, paged with the total', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const v = await seedUser(r);
      for (let i = 0; i < 5; i++) await r.ledger.apply({ userId: i % 2 ? v.id : u.id, kind: i < 3 ? 'topup' : 'redeem', amount: i + 1, ref: `r${i}`, at: i });
      const refs = async (f: { userId?: number; kind?: string; offset?: number; limit?: number }) => {
        const res = await r.ledger.list({ offset: 0, limit: 10, ...f });
        return [res.items.map((x) => x.ref), res.total];
      };
      expect(await refs({})).toEqual([['r4', 'r3', 'r2', 'r1', 'r0'], 5]);
      expect(await refs({ userId: u.id })).toEqual([['r4', 'r2', 'r0'], 3]);
      expect(await refs({ kind: 'redeem' })).toEqual([['r4', 'r3'], 2]);
      expect(await refs({ kind: '' })).toEqual([['r4', 'r3', 'r2', 'r1', 'r0'], 5]);
      expect(await refs({ userId: v.id, kind: 'topup' })).toEqual([['r1'], 1]);
      expect(await refs({ offset: 2, limit: 2 })).toEqual([['r2', 'r1'], 5]);
    });
  });

  describe('usage logs', () => {
    const env = useEnv(make);

    test('deletedKeyOwners: the owners of deleted keys only, by id, across more ids than one query binds', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const v = await seedUser(r);
      const [gone, goneToo, live] = [await seedKey(r, u.id), await seedKey(r, v.id), await seedKey(r, u.id)];
      await r.apiKeys.delete(gone.id);
      await r.apiKeys.delete(goneToo.id);
      // Unknown ids around them push the deleted ones into different slices of the batched read.
      const filler = Array.from({ length: DELETED_KEYS_PER_QUERY + 10 }, (_, i) => 50_000_000 + i);
      const asked = [gone.id, ...filler, live.id, goneToo.id];
      expect([...(await r.usageLogs.deletedKeyOwners(asked))].sort((a, b) => a[0] - b[0])).toEqual([[gone.id, u.id], [goneToo.id, v.id]]);
      expect((await r.usageLogs.deletedKeyOwners([])).size).toBe(0);
    });

    test('insertOnce: true once per request id, defaults applied, booleans and big numbers kept', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const row = usage({ requestId: 'r-1', userId: u.id, apiKeyId: 7, cost: BIG, stream: true });
      expect(await r.usageLogs.insertOnce(row)).toBe(true);
      expect(await r.usageLogs.insertOnce({ ...row, cost: 1 })).toBe(false);
      const back = await r.usageLogs.byRequestId('r-1');
      expect(back).toMatchObject({
        requestId: 'r-1', kind: 'messages', channelId: null, upstreamModel: '', stream: true, longContext: false, cost: BIG, ttftMs: null,
        errorCode: '', usageFlag: '', attempts: 1, ip: '', group: '', priceRatio: 1000, cacheWrite1hTokens: 0,
      });
      expect(await r.usageLogs.byRequestId('r-2')).toBeUndefined();
      expect(await r.usageLogs.insertOnce(usage({ userId: u.id, apiKeyId: 7 }))).toBe(true);
      expect((await r.usageLogs.list({ offset: 0, limit: 10 })).items[0]!.stream).toBe(false);
    });

    test('addUserUsage counts only successes; addKeyUsage takes remain_quota only from limited keys', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const unlimited = await seedKey(r, u.id, { remainQuota: 50 });
      const limited = await seedKey(r, u.id, { unlimitedQuota: false, remainQuota: BIG });
      await r.usageLogs.addUserUsage(u.id, 30, true);
      await r.usageLogs.addUserUsage(u.id, 12, false);
      expect(await r.users.byId(u.id)).toMatchObject({ usedQuota: 42, requestCount: 1, quota: 0 });
      await r.usageLogs.addKeyUsage(unlimited.id, 20);
      await r.usageLogs.addKeyUsage(limited.id, 20);
      expect(await r.apiKeys.byId(unlimited.id)).toMatchObject({ usedQuota: 20, remainQuota: 50 });
      expect(await r.apiKeys.byId(limited.id)).toMatchObject({ usedQuota: 20, remainQuota: BIG - 20 });
    });

    test('list filters (user, key, channel, model, status, inclusive time range), newest first, paged', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const rows = [
        usage({ userId: u.id, apiKeyId: 1, channelId: 1, model: 'a', status: 200, createdAt: 100 }),
        usage({ userId: u.id, apiKeyId: 2, channelId: 1, model: 'b', status: 500, createdAt: 200 }),
        usage({ userId: u.id + 1, apiKeyId: 3, channelId: 2, model: 'a', status: 200, createdAt: 300 }),
        usage({ userId: u.id, apiKeyId: 1, channelId: null, model: 'a', status: 429, createdAt: 400 }),
      ];
      for (const x of rows) await r.usageLogs.insertOnce(x);
      const reqs = async (f: Record<string, unknown>) => {
        const res = await r.usageLogs.list({ offset: 0, limit: 10, ...f });
        return [res.items.map((x) => x.requestId), res.total];
      };
      const id = (i: number) => rows[i]!.requestId;
      expect(await reqs({})).toEqual([[id(3), id(2), id(1), id(0)], 4]);
      expect(await reqs({ userId: u.id })).toEqual([[id(3), id(1), id(0)], 3]);
      expect(await reqs({ apiKeyId: 1 })).toEqual([[id(3), id(0)], 2]);
      expect(await reqs({ channelId: 1 })).toEqual([[id(1), id(0)], 2]);
      expect(await reqs({ model: 'a', status: 200 })).toEqual([[id(2), id(0)], 2]);
      expect(await reqs({ from: 200, to: 300 })).toEqual([[id(2), id(1)], 2]);
      expect(await reqs({ from: 201 })).toEqual([[id(3), id(2)], 2]);
      expect(await reqs({ offset: 1, limit: 2 })).toEqual([[id(2), id(1)], 4]);
    });
  });

  describe('settlements', () => {
    const env = useEnv(make);

    test('a charge writes the usage row, the ledger charge, user and key counters; a repeat writes nothing', async () => {
      const r = env().repos;
      const u = await seedUser(r, { quota: BIG });
      const k = await seedKey(r, u.id, { unlimitedQuota: false, remainQuota: 1_000 });
      const s = settlement({ userId: u.id, apiKeyId: k.id, cost: 300, usageFlag: 'estimated', group: 'vip', priceRatio: 800, cacheWrite1hTokens: 1, longContext: true, billedModel: 'up-m', overrides: '["clamp:max_tokens"]', webSearchRequests: 4, codeExecutionRequests: 2 });
      expect(plain(await r.settlements.apply(s))).toEqual({ inserted: true, balance: BIG - 300 });
      expect(await r.settlements.apply({ ...s, cost: 999 })).toEqual({ inserted: false });
      expect(await r.users.byId(u.id)).toMatchObject({ quota: BIG - 300, usedQuota: 300, requestCount: 1, updatedAt: 2_000 });
      expect(await r.apiKeys.byId(k.id)).toMatchObject({ usedQuota: 300, remainQuota: 700, lastUsedAt: 2_000 });
      const { items } = await r.ledger.list({ userId: u.id, offset: 0, limit: 10 });
      expect(items.map(({ id: _, ...x }) => x)).toEqual([{ userId: u.id, kind: 'charge', amount: -300, balanceAfter: BIG - 300, ref: s.requestId, note: 'm', actorId: null, createdAt: 2_000 }]);
      const { id: _, ...row } = (await r.usageLogs.byRequestId(s.requestId))!;
      expect(row).toEqual({
        requestId: s.requestId, kind: 'messages', userId: u.id, apiKeyId: k.id, channelId: 3, model: 'm', upstreamModel: 'up-m', stream: true,
        inputTokens: 10, outputTokens: 20, cacheReadTokens: 1, cacheWriteTokens: 2, cacheWrite1hTokens: 1, longContext: true, audioInputTokens: 0,
        audioOutputTokens: 0, webSearchRequests: 4, codeExecutionRequests: 2, cost: 300, latencyMs: 50, ttftMs: 5, status: 200, errorCode: '', usageFlag: 'estimated', attempts: 1, ip: '10.0.0.1',
        group: 'vip', priceRatio: 800, billedModel: 'up-m', overrides: '["clamp:max_tokens"]', createdAt: 2_000,
      });
      expect(await r.ledger.sum(u.id)).toBe(-300); // the opening balance was set directly, not through the ledger
    });

    test('older journal rows without the optional fields get their defaults', async () => {
      const r = env().repos;
      const u = await seedUser(r, { quota: 10 });
      const k = await seedKey(r, u.id);
      const s = settlement({ userId: u.id, apiKeyId: k.id, cost: 1, stream: false, ttftMs: null, channelId: null });
      expect(plain(await r.settlements.apply(s))).toEqual({ inserted: true, balance: 9 });
      expect(await r.usageLogs.byRequestId(s.requestId)).toMatchObject({ usageFlag: '', group: '', priceRatio: 1000, cacheWrite1hTokens: 0, longContext: false, billedModel: '', overrides: '', stream: false, ttftMs: null, channelId: null });
    });

    test('free and failed requests: no ledger row for cost 0, request_count only for successes, last use never moves back', async () => {
      const r = env().repos;
      const u = await seedUser(r, { quota: 1_000 });
      const k = await seedKey(r, u.id);
      expect(plain(await r.settlements.apply(settlement({ userId: u.id, apiKeyId: k.id, cost: 0, createdAt: 5_000 })))).toEqual({ inserted: true, balance: undefined });
      expect(plain(await r.settlements.apply(settlement({ userId: u.id, apiKeyId: k.id, cost: 0, status: 500, createdAt: 6_000 })))).toEqual({ inserted: true, balance: undefined });
      expect(await r.users.byId(u.id)).toMatchObject({ quota: 1_000, usedQuota: 0, requestCount: 1 });
      expect(await r.apiKeys.byId(k.id)).toMatchObject({ usedQuota: 0, remainQuota: 0, lastUsedAt: 6_000 });
      expect(plain(await r.settlements.apply(settlement({ userId: u.id, apiKeyId: k.id, cost: 40, status: 502, createdAt: 4_000 })))).toEqual({ inserted: true, balance: 960 });
      expect(await r.users.byId(u.id)).toMatchObject({ quota: 960, usedQuota: 40, requestCount: 1 });
      // Unlimited key: used_quota grows, remain_quota does not move; the earlier time does not rewind last use.
      expect(await r.apiKeys.byId(k.id)).toMatchObject({ usedQuota: 40, remainQuota: 0, lastUsedAt: 6_000 });
      expect((await r.ledger.list({ userId: u.id, offset: 0, limit: 10 })).total).toBe(1);
      expect((await r.usageLogs.list({ userId: u.id, offset: 0, limit: 10 })).total).toBe(3);
    });

    test('a charge to a missing user fails', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const k = await seedKey(r, u.id);
      await expect((async () => r.settlements.apply(settlement({ userId: 987654, apiKeyId: k.id, cost: 5 })))()).rejects.toThrow('no user 987654');
    });
  });

  describe('usage statistics', () => {
    const env = useEnv(make);
    const q = (over: Record<string, unknown> = {}) => ({ from: 0, to: 1_000_000, bucketSeconds: 3600, offsetSeconds: 0, groupBy: 'none' as const, maxRows: 100, ...over });

    async function seed(r: ContractRepos) {
      const u = await seedUser(r);
      const rows = [
        usage({ userId: u.id, apiKeyId: 1, channelId: 1, model: 'b', createdAt: 3_599, inputTokens: 10, outputTokens: 1, cost: BIG, latencyMs: 100 }),
        usage({ userId: u.id, apiKeyId: 1, channelId: 2, model: 'B', createdAt: 3_600, inputTokens: 20, audioInputTokens: 3, audioOutputTokens: 4, status: 500, cost: 5 }),
        usage({ userId: u.id, apiKeyId: 2, channelId: null, model: 'a', createdAt: 3_700, errorCode: 'timeout', cacheReadTokens: 7, cacheWriteTokens: 8, cost: BIG }),
        usage({ userId: u.id + 1, apiKeyId: 3, channelId: 1, model: 'b', createdAt: 7_300, outputTokens: 9, cost: 1 }),
      ];
      for (const x of rows) await r.usageLogs.insertOnce(x);
      return { u, rows };
    }

    test('aggregate per bucket (none): sums exact beyond 2^32, errors = status >= 400 or an error code', async () => {
      const r = env().repos;
      await seed(r);
      expect(await r.usageStats.aggregate(q())).toEqual([
        { bucket: 0, grp: null, requests: 1, errors: 0, inputTokens: 10n, outputTokens: 1n, cacheReadTokens: 0n, cacheWriteTokens: 0n, audioTokens: 0n, cost: BigInt(BIG) },
        { bucket: 3600, grp: null, requests: 2, errors: 2, inputTokens: 20n, outputTokens: 0n, cacheReadTokens: 7n, cacheWriteTokens: 8n, audioTokens: 7n, cost: BigInt(BIG) + 5n },
        { bucket: 7200, grp: null, requests: 1, errors: 0, inputTokens: 0n, outputTokens: 9n, cacheReadTokens: 0n, cacheWriteTokens: 0n, audioTokens: 0n, cost: 1n },
      ]);
    });

    test('sums are exact BigInts past 2^53 and past 2^63 (SQLite sum() would round, then fail with integer overflow), negatives included', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const top = Number.MAX_SAFE_INTEGER;
      // Values no settlement writes (one row's cost is at most 2^53 − 1): what a hand-edited table can hold.
      // 5e18 is a double whose decimal form is exact (postgres.js sends String(n); String(2 ** 62) is rounded).
      const E = 5e18;
      const rows = [
        usage({ userId: u.id, apiKeyId: 1, createdAt: 10, cost: E, inputTokens: top, audioInputTokens: E, audioOutputTokens: E }),
        usage({ userId: u.id, apiKeyId: 1, createdAt: 11, cost: E, inputTokens: top, outputTokens: 3 }),
        usage({ userId: u.id, apiKeyId: 1, createdAt: 12, cost: top, inputTokens: 1, outputTokens: -E }),
        usage({ userId: u.id, apiKeyId: 1, createdAt: 13, cost: 5, outputTokens: -5 }),
      ];
      for (const x of rows) await r.usageLogs.insertOnce(x);
      const [row] = await r.usageStats.aggregate(q({ from: 0, to: 100 }));
      expect(row).toMatchObject({
        requests: 4, cost: 10n ** 19n + BigInt(top) + 5n, inputTokens: 2n * BigInt(top) + 1n, outputTokens: 3n - 5n * 10n ** 18n - 5n, audioTokens: 10n ** 19n,
      });
    });

    test('aggregate grouped by model (bytewise order), channel (null for none), key and user; offsets shift buckets', async () => {
      const r = env().repos;
      const { u } = await seed(r);
      const pick = async (over: Record<string, unknown>) => (await r.usageStats.aggregate(q(over))).map((x) => [x.bucket, x.grp, x.requests]);
      expect(await pick({ groupBy: 'model', bucketSeconds: 86400 })).toEqual([[0, 'B', 1], [0, 'a', 1], [0, 'b', 2]]);
      expect(await pick({ groupBy: 'channel', bucketSeconds: 86400 })).toEqual([[0, null, 1], [0, 1, 2], [0, 2, 1]]);
      expect(await pick({ groupBy: 'key' })).toEqual([[0, 1, 1], [3600, 1, 1], [3600, 2, 1], [7200, 3, 1]]);
      expect(await pick({ groupBy: 'user', bucketSeconds: 86400 })).toEqual([[0, u.id, 3], [0, u.id + 1, 1]]);
      // Buckets start at offset-local boundaries: +1800 s puts 3599 and 3600 in the bucket starting at 1800.
      expect(await pick({ offsetSeconds: 1800 })).toEqual([[1800, null, 3], [5400, null, 1]]);
      // Integer division truncates toward zero on both backends: a negative shifted time lands in bucket 0 - offset.
      expect(await pick({ offsetSeconds: -4000 })).toEqual([[4000, null, 4]]);
      expect(await pick({ offsetSeconds: 1 })).toEqual([[3599, null, 3], [7199, null, 1]]);
    });

    test('aggregate filters and the maxRows + 1 cap', async () => {
      const r = env().repos;
      const { u } = await seed(r);
      const pick = async (over: Record<string, unknown>) => (await r.usageStats.aggregate(q(over))).map((x) => [x.bucket, x.requests]);
      expect(await pick({ userId: u.id })).toEqual([[0, 1], [3600, 2]]);
      expect(await pick({ apiKeyId: 1 })).toEqual([[0, 1], [3600, 1]]);
      expect(await pick({ channelId: 1 })).toEqual([[0, 1], [7200, 1]]);
      expect(await pick({ model: 'b' })).toEqual([[0, 1], [7200, 1]]);
      expect(await pick({ from: 3_600, to: 3_700 })).toEqual([[3600, 2]]);
      expect(await pick({ maxRows: 1 })).toEqual([[0, 1], [3600, 2]]);
    });

    test('latency histogram bins match the definition exactly, at and around every power of two', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const latencies = new Set<number>([0]);
      for (let x = 1; x <= 300; x++) latencies.add(x);
      for (let p = 9; p <= 40; p++) for (const d of [-1, 0, 1]) latencies.add(2 ** p + d);
      for (const ms of latencies) await r.usageLogs.insertOnce(usage({ userId: u.id, apiKeyId: 1, latencyMs: ms, createdAt: 10 }));
      const expected = new Map<number, number>();
      for (const ms of latencies) expected.set(exactBin(ms), (expected.get(exactBin(ms)) ?? 0) + 1);
      const hist = await r.usageStats.latencyHistogram(q());
      expect(hist.every((h) => h.bucket === 0 && h.grp === null)).toBe(true);
      expect(new Map(hist.map((h) => [h.bin, h.n]))).toEqual(expected);
      const byChannel = await r.usageStats.latencyHistogram(q({ groupBy: 'channel' }));
      expect(byChannel.reduce((s, h) => s + h.n, 0)).toBe(latencies.size);
      expect(byChannel.every((h) => h.grp === null)).toBe(true);
    });

    test('exportPage walks (created_at, id) keyset pages in order with filters', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const made = [];
      for (const [i, t] of [50, 10, 30, 10, 30, 20].entries()) {
        const x = usage({ userId: i === 5 ? u.id + 1 : u.id, apiKeyId: 1, createdAt: t });
        await r.usageLogs.insertOnce(x);
        made.push((await r.usageLogs.byRequestId(x.requestId))!);
      }
      const order = [...made].sort((a, b) => a.createdAt - b.createdAt || a.id - b.id).map((x) => x.requestId);
      const seen: string[] = [];
      let after: { createdAt: number; id: number } | null = null;
      for (let pages = 0; pages < 10; pages++) {
        const page = await r.usageStats.exportPage({}, after, 4);
        seen.push(...page.map((x) => x.requestId));
        if (page.length < 4) break;
        const last = page[page.length - 1]!;
        after = { createdAt: last.createdAt, id: last.id };
      }
      expect(seen).toEqual(order);
      const mine = await r.usageStats.exportPage({ userId: u.id, from: 20 }, null, 10);
      expect(mine.map((x) => x.createdAt)).toEqual([30, 30, 50]);
      expect(await r.usageStats.exportPage({ userId: u.id }, { createdAt: 50, id: made[0]!.id }, 10)).toEqual([]);
    });
  });

  describe('realtime sessions', () => {
    const env = useEnv(make);
    const rec = (sessionId: string, userId: number, over = {}) => ({
      sessionId, userId, apiKeyId: 1, channelId: null, model: 'rt', startedAt: 1, endedAt: 2, durationMs: 1_000, ...over,
    });

    test('insert is once per session id; bySessionId; list per user, newest first, paged', async () => {
      const r = env().repos;
      await r.realtimeSessions.insert(rec('s1', 1, { cost: BIG, bytesIn: BIG, closeCode: 1000, closeReason: 'bye' }));
      await r.realtimeSessions.insert(rec('s1', 1, { cost: 1 }));
      await r.realtimeSessions.insert(rec('s2', 2));
      await r.realtimeSessions.insert(rec('s3', 1, { channelId: 4 }));
      expect(await r.realtimeSessions.bySessionId('s1')).toMatchObject({ cost: BIG, bytesIn: BIG, framesIn: 0, responses: 0, closeCode: 1000, closeReason: 'bye', channelId: null });
      expect(await r.realtimeSessions.bySessionId('nope')).toBeUndefined();
      const all = await r.realtimeSessions.list({ offset: 0, limit: 10 });
      expect([all.items.map((x) => x.sessionId), all.total]).toEqual([['s3', 's2', 's1'], 3]);
      const mine = await r.realtimeSessions.list({ userId: 1, offset: 1, limit: 1 });
      expect([mine.items.map((x) => x.sessionId), mine.total]).toEqual([['s1'], 2]);
    });
  });
}

/**
 * Without what only PostgreSQL reports, the balance versions: a settlement's `mirror`, a balance event's
 * `version` (SQLite keeps no versions; PostgreSQL's are tested in its own suites).
 */
function plain(o: object, field = 'mirror'): Record<string, unknown> {
  const { [field]: _, ...rest } = o as Record<string, unknown>;
  return rest;
}
