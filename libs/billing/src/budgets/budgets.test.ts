import { afterEach, beforeEach, describe, expect, test } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChangeBus, GatewayError, memoryLogger } from '@gw/core';
import { AlertOutboxRepo, BudgetChargesRepo, BudgetsRepo, LedgerRepo, PricesRepo, SettlementsRepo, UsersRepo, apiKeys, budgets, openDatabase, type DbHandle } from '@gw/db';
import { ConfigError } from '@gw/config';
import { PriceBook } from '../price-book';
import { QuotaService, type UsageLogInput } from '../quota';
import { BudgetBook } from './book';
import { periodEnd, periodKey, periodStart } from './period';
import { reachedMask, thresholdsOf } from './thresholds';
import { alertWebhookConfig } from './webhook-config';
import { AlertDispatcher, signAlert } from './alert-webhook';
import { clearOfUtcDayEnd } from '../../../../tests/helpers/window-edge';

describe('periods (UTC calendar)', () => {
  test('keys and boundaries across a year end and a leap February', () => {
    const t = Date.UTC(2024, 11, 31, 23, 59, 59, 999);
    expect([periodKey('daily', t), periodKey('monthly', t)]).toEqual(['2024-12-31', '2024-12']);
    expect(periodEnd('daily', t)).toBe(Date.UTC(2025, 0, 1));
    expect(periodEnd('monthly', t)).toBe(Date.UTC(2025, 0, 1));
    expect(periodKey('daily', t + 1)).toBe('2025-01-01');
    const feb = Date.UTC(2024, 1, 29, 12);
    expect(periodEnd('monthly', feb)).toBe(Date.UTC(2024, 2, 1));
    expect(periodStart('monthly', feb)).toBe(Date.UTC(2024, 1, 1));
    expect(periodStart('daily', feb)).toBe(Date.UTC(2024, 1, 29));
  });

  test('thresholds compare exactly, also past 2^53 / 100', () => {
    expect(thresholdsOf(reachedMask(49, 100))).toEqual([]);
    expect(thresholdsOf(reachedMask(50, 100))).toEqual([50]);
    expect(thresholdsOf(reachedMask(799, 999))).toEqual([50]); // 79.98 %
    expect(thresholdsOf(reachedMask(800, 999))).toEqual([50, 80]);
    expect(thresholdsOf(reachedMask(1e15, 1e15))).toEqual([50, 80, 100]);
    expect(thresholdsOf(reachedMask(1e15 - 1, 1e15))).toEqual([50, 80]);
  });
});

let dir: string;
let h: DbHandle;
let quota: QuotaService;
let book: BudgetBook;
let userId: number;
let keyId: number;
let restart: () => { book: BudgetBook; quota: QuotaService };
const key = () => ({ id: keyId, unlimitedQuota: true, remainQuota: 0 });

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'budgets-'));
  h = openDatabase(join(dir, 'db.sqlite'));
  const bus = new ChangeBus();
  const users = new UsersRepo(h.db);
  const prices = await PriceBook.load(new PricesRepo(h.db), bus);
  await prices.upsert({ model: 'm', input: 1_000_000, output: 1_000_000, cache_read: 0, cache_write: 0 });
  userId = (await users.insert({ username: 'u1', passwordHash: 'x', createdAt: 1, updatedAt: 1 })).id;
  await new LedgerRepo(h.db, bus).apply({ userId, kind: 'topup', amount: 1_000_000, ref: 't1', at: 1 });
  keyId = h.db.insert(apiKeys).values({ userId, keyHash: 'h', prefix: 'sk-', createdAt: 1, updatedAt: 1 }).returning().get().id;
  book = new BudgetBook({ repo: new BudgetsRepo(h.db), charges: new BudgetChargesRepo(h.sqlite), deliver: true });
  quota = new QuotaService({ sink: new SettlementsRepo(h.sqlite), prices, bus, budgets: book });
  restart = () => {
    const b = new BudgetBook({ repo: new BudgetsRepo(h.db), charges: new BudgetChargesRepo(h.sqlite), deliver: true });
    return { book: b, quota: new QuotaService({ sink: new SettlementsRepo(h.sqlite), prices, bus, budgets: b }) };
  };
});
afterEach(() => { h.close(); rmSync(dir, { recursive: true, force: true }); });

const log = (requestId: string, input: number): UsageLogInput => ({
  requestId, userId, apiKeyId: keyId, channelId: 1, model: 'm', upstreamModel: 'm', stream: false, usage: { input, output: 0 },
  latencyMs: 1, ttftMs: 1, status: 200, errorCode: '', attempts: 1, ip: '',
});
const budgetRow = (over: Partial<typeof budgets.$inferInsert> = {}) =>
  h.db.insert(budgets).values({ scope: 'user', subjectId: userId, period: 'daily', limitAmount: 100, createdAt: 1, updatedAt: 1, ...over }).returning().get();

describe('BudgetBook with QuotaService', () => {
  // These run on the real clock: a test's reserves, charges and its expected period key in one UTC day.
  beforeEach(() => clearOfUtcDayEnd(2_000));

  test('a budget spent up yesterday admits today, and the first charge of today restarts the count', () => {
    const b = budgetRow({ periodKey: '2000-01-01', spent: 100, alerted: 7 });
    book.reload();
    const r = quota.reserveLocal({ userId, apiKey: key(), amount: 100, ref: 'a' });
    expect(() => quota.reserveLocal({ userId, apiKey: key(), amount: 1, ref: 'b' })).toThrow(GatewayError);
    quota.settle(r, log('a', 30));
    const row = new BudgetsRepo(h.db).byId(b.id)!;
    expect([row.periodKey, row.spent, row.alerted]).toEqual([periodKey('daily', Date.now()), 30, 0]);
    expect(book.usage(b.id)).toMatchObject({ spent: 30, held: 0, pending: 0 });
  });

  test('a late charge of an earlier period (journal replay) never resets the current one, and counts in it', () => {
    const today = periodKey('daily', Date.now());
    const b = budgetRow({ periodKey: today, spent: 40 });
    expect(new BudgetChargesRepo(h.sqlite).charge(b.id, '2000-01-01', 5)).toMatchObject({ periodKey: today, spent: 45 });
    expect(new BudgetsRepo(h.db).byId(b.id)).toMatchObject({ periodKey: today, spent: 45 });
  });

  test('an alert of a late charge is capped and dated in the period the charge counted in, not its own', () => {
    // What a first charge of tomorrow committed first leaves: the budget counts tomorrow. Today's charge then counts
    // there; its cap row expiring at today's end would be pruned while tomorrow's count still runs.
    const tomorrowMs = Date.now() + 86_400_000;
    const next = periodKey('daily', tomorrowMs);
    const b = budgetRow({ periodKey: next, spent: 40, limitAmount: 100 });
    book.reload();
    quota.settle(quota.reserveLocal({ userId, apiKey: key(), amount: 20, ref: 'late' }), log('late', 20));
    expect(new BudgetsRepo(h.db).byId(b.id)).toMatchObject({ periodKey: next, spent: 60 });
    const cap = h.sqlite.query('select period_key, expires_at from alert_caps where cap_key = ?').get(`user:${userId}:daily`) as { period_key: string; expires_at: number };
    expect(cap).toEqual({ period_key: next, expires_at: periodEnd('daily', tomorrowMs) });
    const [alert] = new AlertOutboxRepo(h.db).list({ offset: 0, limit: 10 }).items;
    expect(JSON.parse(alert!.payload).data).toMatchObject({ threshold: 50, period_key: next, period_end: periodEnd('daily', tomorrowMs) / 1000 });
  });

  test('recorded, uncommitted charges count as spent; a charge is capped at the budget; releases give the hold back', () => {
    const b = budgetRow({ limitAmount: 100 });
    book.reload();
    const r1 = quota.reserveLocal({ userId, apiKey: key(), amount: 60, ref: 'r1' });
    expect(book.usage(b.id)!.held).toBe(60);
    // The upstream reports more than the hold: the charge stops at the budget (60 held + 40 free).
    expect(quota.record(r1, log('r1', 500))).toBe(100);
    expect(book.usage(b.id)).toMatchObject({ held: 0, pending: 100, spent: 0 });
    expect(() => quota.reserveLocal({ userId, apiKey: key(), amount: 1, ref: 'r2' })).toThrow(/daily budget of this user/);
    quota.flush();
    expect(book.usage(b.id)).toMatchObject({ held: 0, pending: 0, spent: 100 });
    const e = (() => { try { quota.reserveLocal({ userId, apiKey: key(), amount: 1, ref: 'r3' }); } catch (x) { return x as GatewayError; } })()!;
    expect([e.status, e.code]).toEqual([402, 'user_budget_exceeded']);
    expect(Number(e.headers['retry-after'])).toBeGreaterThan(0);
  });

  test('a refused budget leaves no hold on the balance or the key; no budget = no statement and no alert', () => {
    budgetRow({ scope: 'key', subjectId: keyId, limitAmount: 10 });
    book.reload();
    const before = quota.available(userId);
    expect(() => quota.reserveLocal({ userId, apiKey: key(), amount: 11, ref: 'x' })).toThrow(/API key/);
    expect(quota.available(userId)).toBe(before);
    expect(book.concerns(userId + 1, keyId + 1)).toBe(false);
  });

  test('thresholds go to the outbox in the charge transaction, once per period each', () => {
    budgetRow({ limitAmount: 100 });
    book.reload();
    for (const [i, n] of [[1, 49], [2, 1], [3, 35], [4, 15]] as const) quota.settle(quota.reserveLocal({ userId, apiKey: key(), amount: n, ref: `t${i}` }), log(`t${i}`, n));
    const rows = new AlertOutboxRepo(h.db).list({ offset: 0, limit: 10 }).items.reverse();
    expect(rows.map((r) => JSON.parse(r.payload).data.threshold)).toEqual([50, 80, 100]);
    expect(rows.every((r) => r.status === 'pending')).toBe(true);
  });

  test('alert caps are counted in the database: 12 restarts, each crossing a re-armed low-balance threshold once, write 9', () => {
    const repo = new BudgetsRepo(h.db);
    for (let i = 0; i < 12; i++) {
      const p = restart();
      repo.setLowBalance(userId, (h.sqlite.query('select quota from users where id = ?').get(userId) as { quota: number }).quota, 1);
      p.book.reload();
      p.quota.settle(p.quota.reserveLocal({ userId, apiKey: key(), amount: 1, ref: `r${i}` }), log(`r${i}`, 1));
    }
    const low = new AlertOutboxRepo(h.db).list({ offset: 0, limit: 100 }).items.filter((r) => r.type === 'balance.low');
    expect(low.length).toBe(9);
  });
});

describe('alert webhook', () => {
  test('config: a URL needs a secret of 16+ characters and must be http(s)', () => {
    expect(alertWebhookConfig({}).url).toBeNull();
    expect(() => alertWebhookConfig({ ALERT_WEBHOOK_URL: 'http://x/h' })).toThrow(ConfigError);
    expect(() => alertWebhookConfig({ ALERT_WEBHOOK_URL: 'ftp://x/h', ALERT_WEBHOOK_SECRET: 'x'.repeat(16) })).toThrow(ConfigError);
    expect(alertWebhookConfig({ ALERT_WEBHOOK_URL: 'https://x/h', ALERT_WEBHOOK_SECRET: 'x'.repeat(16) }).maxAttempts).toBe(12);
  });

  test('a pending alert left by a previous process is delivered on start; one never accepted ends failed after the last attempt', async () => {
    const charges = new BudgetChargesRepo(h.sqlite);
    charges.enqueue({ eventId: 'evt_left', type: 'balance.low', payload: '{"id":"evt_left"}', status: 'pending', nextAttemptAt: 0, createdAt: 1 });
    charges.enqueue({ eventId: 'evt_bad', type: 'balance.low', payload: '{"id":"evt_bad"}', status: 'pending', nextAttemptAt: 0, createdAt: 1 });
    const got: Array<{ id: string; sig: string; body: string }> = [];
    const srv = Bun.serve({
      port: 0, hostname: '127.0.0.1',
      async fetch(req) {
        const body = await req.text();
        got.push({ id: req.headers.get('x-gateway-event-id')!, sig: req.headers.get('x-gateway-signature')!, body });
        return new Response(null, { status: body.includes('evt_bad') ? 503 : 204 });
      },
    });
    const { log, lines } = memoryLogger({ format: 'text' });
    const outbox = new AlertOutboxRepo(h.db);
    const d = new AlertDispatcher(outbox, { url: `http://127.0.0.1:${srv.port}/`, secret: 's'.repeat(16), timeoutMs: 1000, maxAttempts: 3, retryMs: 10, retryMaxMs: 20, pollMs: 10, retentionDays: 0, pruneMs: 1000 }, log);
    d.start();
    const deadline = Date.now() + 3000;
    while (Date.now() < deadline && outbox.list({ status: 'pending', offset: 0, limit: 10 }).total > 0) await Bun.sleep(10);
    await d.close();
    srv.stop(true);
    const byId = Object.fromEntries(outbox.list({ offset: 0, limit: 10 }).items.map((r) => [r.eventId, r]));
    expect(byId.evt_left).toMatchObject({ status: 'delivered', attempts: 1 });
    expect(byId.evt_bad).toMatchObject({ status: 'failed', attempts: 3, lastError: 'HTTP 503' });
    expect(got.filter((g) => g.id === 'evt_bad')).toHaveLength(3);
    const first = got.find((g) => g.id === 'evt_left')!;
    const t = Number(/^t=(\d+),/.exec(first.sig)![1]);
    expect(first.sig).toBe(signAlert('s'.repeat(16), first.body, t));
    expect(lines.some((l) => l.includes('alert.delivery_failed') && l.includes('evt_bad'))).toBe(true);
  });
});
