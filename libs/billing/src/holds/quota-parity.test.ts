/**
 * MemoryHoldStore must admit, refuse and cap exactly like today's QuotaService, so SQLite mode
 * keeps its numbers when QuotaService moves onto the HoldStore port. Both see one random sequence
 * of reserves, releases and settlements on a user with a limited and an unlimited key; after each
 * settlement is committed, the store gets the ledger's new balance the way the PostgreSQL
 * settlement will hand it over (release with the post-commit mirror).
 */
import { afterAll, expect, test } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChangeBus, GatewayError } from '@gw/core';
import { LedgerRepo, PricesRepo, SettlementsRepo, UsersRepo, apiKeys, openDatabase } from '@gw/db';
import { PriceBook } from '../price-book';
import { QuotaService, type Reservation } from '../quota';
import { MemoryHoldStore } from './memory';
import type { Hold } from './port';

const dir = mkdtempSync(join(tmpdir(), 'holds-parity-'));
const h = openDatabase(join(dir, 'db.sqlite'));
afterAll(() => {
  h.close();
  rmSync(dir, { recursive: true, force: true });
});

test('same admissions, refusals (user or key) and capped charges as QuotaService over 3,000 random steps', async () => {
  const bus = new ChangeBus();
  const users = new UsersRepo(h.db);
  const ledger = new LedgerRepo(h.db, bus);
  const book = await PriceBook.load(new PricesRepo(h.db), bus);
  // One unit per input token: a settlement's cost is the number the test picks.
  await book.upsert({ model: 'm', input: 1_000_000, output: 0, cache_read: 0, cache_write: 0 });
  const quota = new QuotaService({ sink: new SettlementsRepo(h.sqlite), prices: book, bus });
  const userId = (await users.insert({ username: 'parity', passwordHash: 'x', createdAt: 1, updatedAt: 1 })).id;
  await ledger.apply({ userId, kind: 'topup', amount: 2_000, ref: 't', at: 1 });
  const newKey = (unlimited: boolean, remain: number) =>
    h.db.insert(apiKeys).values({ userId, keyHash: `h${unlimited}`, prefix: 'sk-', unlimitedQuota: unlimited, remainQuota: remain, createdAt: 1, updatedAt: 1 }).returning().get().id;
  const limitedId = newKey(false, 700);
  const unlimitedId = newKey(true, 0);
  const remain = () => (h.sqlite.query('select remain_quota as r from api_keys where id = ?').get(limitedId) as { r: number }).r;
  let version = 1;
  const store = new MemoryHoldStore(async () => ({ user: { balance: (await users.byId(userId))!.quota, version }, key: { balance: remain(), version } }));

  let seed = 7;
  const rand = (n: number) => Math.floor(((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * n);
  const live: Array<{ r: Reservation; hold: Hold }> = [];
  const seen = { ok: 0, user: 0, key: 0, capped: 0 };
  for (let step = 0; step < 3_000; step++) {
    const op = rand(10);
    if (op < 5 || !live.length) {
      const limited = rand(2) === 0;
      const amount = 1 + rand(120);
      const apiKey = { id: limited ? limitedId : unlimitedId, unlimitedQuota: !limited, remainQuota: limited ? remain() : 0 };
      const ref = `s${step}`;
      let expected: string;
      let r: Reservation | null = null;
      try {
        r = quota.reserveLocal({ userId, apiKey, amount, ref });
        expected = 'ok';
      } catch (err) {
        expected = (err as GatewayError).code === 'key_quota_exhausted' ? 'key' : 'user';
      }
      const got = await store.reserve({ userId, keyId: limited ? limitedId : null, amount, ref, leaseMs: 60_000 });
      expect({ step, got: got.ok ? 'ok' : got.reason === 'short' ? got.scope : got.reason }).toEqual({ step, got: expected });
      seen[expected as keyof typeof seen]++;
      if (r && got.ok) live.push({ r, hold: got.hold });
    } else if (op === 9) {
      // Other ledger writers: a top-up (QuotaService hears balance.changed; the store gets the
      // post-commit mirror), and an operator raising the key's quota.
      await ledger.apply({ userId, kind: 'topup', amount: 150, ref: `t${step}`, at: 1 });
      h.sqlite.query('update api_keys set remain_quota = remain_quota + 60 where id = ?').run(limitedId);
      version++;
      await store.applyBalance({ userId }, { balance: (await users.byId(userId))!.quota, version });
      await store.applyBalance({ userId, keyId: limitedId }, { balance: remain(), version });
    } else if (op < 7) {
      const { r, hold } = live.splice(rand(live.length), 1)[0]!;
      quota.release(r);
      await store.release(hold);
    } else {
      const { r, hold } = live.splice(rand(live.length), 1)[0]!;
      const cost = rand(200);
      // QuotaService caps a limited key's charge with the remain_quota its last successful
      // reservation saw, which misses commits since (so a key can be overdrawn by them); the store
      // caps with the committed one. Give QuotaService the fresh value, so the comparison is of
      // the rule, not of that staleness.
      (quota as unknown as { keyRemain: Map<number, number> }).keyRemain.set(limitedId, remain());
      const charged = quota.record(r, {
        requestId: r.ref, userId, apiKeyId: r.keyId, channelId: 1, model: 'm', upstreamModel: 'm', stream: false,
        usage: { input: cost, output: 0, cacheRead: 0, cacheWrite: 0 }, latencyMs: 1, ttftMs: 1, status: 200, errorCode: '', attempts: 1, ip: '',
      });
      expect({ step, charged: await store.settle(hold, cost) }).toEqual({ step, charged });
      if (charged < cost) seen.capped++;
      quota.flush();
      version++;
      await store.release(hold, { user: { balance: (await users.byId(userId))!.quota, version }, key: { balance: remain(), version } });
    }
    expect({ step, avail: (await store.available({ userId })).user }).toEqual({ step, avail: quota.available(userId) });
  }
  // The sequence went through every kind of answer.
  expect(seen.ok).toBeGreaterThan(100);
  expect(seen.user).toBeGreaterThan(10);
  expect(seen.key).toBeGreaterThan(10);
  expect(seen.capped).toBeGreaterThan(10);
});
