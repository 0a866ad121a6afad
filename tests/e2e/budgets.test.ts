/**
 * Periodic budgets over real HTTP: exact admission under concurrency (holds like the balance), 402 with
 * retry-after, spend from committed charges, management rights, thresholds announced once per period
 * in the outbox, and signed at-least-once delivery to a receiver that fails its first attempts.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { createHmac } from 'node:crypto';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfUtcDayEnd } from '../helpers/window-edge';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from './relay-setup';

const SECRET = 'alert-secret-0123456789';
let gw: TestGateway;
let up: Scripted;

/** A webhook receiver that answers 500 to its first `failFirst` deliveries, then 200. */
const receiver = { failFirst: 2, seen: [] as Array<{ id: string; type: string; sig: string; body: string; status: number }> };
const hook = Bun.serve({
  port: 0, hostname: '127.0.0.1',
  async fetch(req) {
    const body = await req.text();
    const status = receiver.seen.length < receiver.failFirst ? 500 : 200;
    receiver.seen.push({ id: req.headers.get('x-gateway-event-id') ?? '', type: req.headers.get('x-gateway-event-type') ?? '', sig: req.headers.get('x-gateway-signature') ?? '', body, status });
    return new Response(status === 200 ? 'ok' : 'down', { status });
  },
});

// Price: 1 unit per input token, 1 per output token. msg() asks max_tokens 100; the worst case of a
// request is its input bound plus 100 output tokens, so the test reads it back from the 402's message.
beforeAll(async () => {
  // Spend, refusals and thresholds below are per UTC day: all of the file in one (see clearOfUtcDayEnd).
  await clearOfUtcDayEnd();
  gw = await startGateway({ BILLING_FLUSH_MS: '1', ALERT_WEBHOOK_URL: `http://127.0.0.1:${hook.port}/hook`, ALERT_WEBHOOK_SECRET: SECRET, ALERT_WEBHOOK_RETRY_MS: '50' });
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['m'] });
  await setPrice(gw, 'm', { input: 1_000_000, output: 1_000_000 });
}, 180_000);
afterAll(async () => {
  await up.stop();
  await gw.stop();
  hook.stop(true);
});


/** The worst case the gateway reserves for msg('m'): measured from an unlimited user's 402 against a 1-unit budget. */
async function worstCase(): Promise<number> {
  const u = await keyedUser(gw);
  await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: u.keyId, period: 'daily', limit: 1 }, u.token);
  const r = await send(gw, u.key, msg('m'));
  expect(r.status).toBe(402);
  return Number(/up to (\d+) quota units/.exec(r.body.error.message)![1]);
}

describe('budgets', () => {
  test('20 concurrent requests against a budget for exactly 5 worst cases: 5 pass, 15 get 402, spend never exceeds it', async () => {
    const hold = await worstCase();
    const u = await keyedUser(gw, 100_000_000);
    const set = await gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: u.id, period: 'daily', limit: 5 * hold });
    expect(set.status).toBe(200);
    expect(set.body.data).toMatchObject({ scope: 'user', subject_id: u.id, user_id: u.id, period: 'daily', limit: 5 * hold, spent: 0, remaining: 5 * hold });
    // Every request is charged its full worst case, and all 20 are in flight together.
    up.fallback = { text: 'ok', delayMs: 200, usage: { input: hold - 100, output: 100 } };
    const rs = await Promise.all(Array.from({ length: 20 }, () => send(gw, u.key, msg('m'))));
    up.fallback = { text: 'Hello there' };
    const statuses = rs.map((r) => r.status).sort();
    expect(statuses).toEqual([...Array(5).fill(200), ...Array(15).fill(402)]);
    const refused = rs.find((r) => r.status === 402)!;
    expect(refused.body.error).toMatchObject({ type: 'billing_error', code: 'user_budget_exceeded', param: '' });
    const untilMidnight = Math.ceil((Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate() + 1) - Date.now()) / 1000);
    expect(Math.abs(Number(refused.headers.get('retry-after')) - untilMidnight)).toBeLessThanOrEqual(2);
    const spent = (await gw.db.get("select coalesce(sum(cost), 0) as s from usage_logs where user_id = ?", u.id)).s;
    expect(spent).toBe(5 * hold);
    const view = (await gw.api('GET', `/api/budget/?scope=user&subject_id=${u.id}`)).body.data[0];
    expect(view).toMatchObject({ spent: 5 * hold, pending: 0, held: 0, remaining: 0, alerted: [50, 80, 100] });
    expect(view.period_key).toBe(new Date().toISOString().slice(0, 10));
    // Refused requests were not charged and left no usage row (402 before routing, like the balance).
    expect((await gw.db.get('select count(*) as n from usage_logs where user_id = ?', u.id)).n).toBe(5);
  });

  test('an upstream reporting 20× the worst case cannot push a budget past its limit: sequential or concurrent, spent = Σ charges', async () => {
    const hold = await worstCase();
    for (const concurrent of [false, true]) {
      const u = await keyedUser(gw, 100_000_000);
      expect((await gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: u.id, period: 'daily', limit: 3 * hold })).status).toBe(200);
      up.fallback = { text: 'ok', delayMs: concurrent ? 200 : 0, usage: { input: 20 * hold, output: 100 } };
      const rs = concurrent ? await Promise.all(Array.from({ length: 8 }, () => send(gw, u.key, msg('m'))))
        : [await send(gw, u.key, msg('m')), await send(gw, u.key, msg('m'))];
      up.fallback = { text: 'Hello there' };
      // Sequential: the first takes the whole budget (its hold plus all that was left), the second is refused.
      expect(rs.map((r) => r.status).sort()).toEqual(concurrent ? [...Array(3).fill(200), ...Array(5).fill(402)] : [200, 402]);
      for (let t = 0; (await gw.api('GET', `/api/budget/?scope=user&subject_id=${u.id}`)).body.data[0].held > 0 && t < 200; t++) await Bun.sleep(10);
      const charged = (await gw.db.get('select coalesce(sum(cost), 0) as s from usage_logs where user_id = ?', u.id)).s;
      const view = (await gw.api('GET', `/api/budget/?scope=user&subject_id=${u.id}`)).body.data[0];
      expect([charged, view.spent, view.held, view.remaining]).toEqual([3 * hold, 3 * hold, 0, 0]);
    }
  });

  test('a key budget and its owner\'s user budget both bind: the tighter refuses, each counts every charge of its scope', async () => {
    const hold = await worstCase();
    const u = await keyedUser(gw, 100_000_000);
    const b = (await gw.api('POST', '/api/token/', { name: 'b' }, u.token)).body.data;
    expect((await gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: u.id, period: 'daily', limit: 3 * hold })).status).toBe(200);
    expect((await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: u.keyId, period: 'monthly', limit: 2 * hold }, u.token)).status).toBe(200);
    up.fallback = { text: 'ok', usage: { input: hold - 100, output: 100 } };
    const codes = [];
    for (const key of [u.key, u.key, u.key, b.key, b.key]) {
      const r = await send(gw, key, msg('m'));
      codes.push(r.status === 200 ? 200 : r.body.error.code);
    }
    up.fallback = { text: 'Hello there' };
    expect(codes).toEqual([200, 200, 'key_budget_exceeded', 200, 'user_budget_exceeded']);
    const views = (await gw.api('GET', '/api/budget/self', undefined, u.token)).body.data.budgets;
    const spent = Object.fromEntries(views.map((v: any) => [v.scope, v.spent]));
    expect(spent).toEqual({ user: 3 * hold, key: 2 * hold });
  });

  test('a key budget binds only that key; clearing it admits again; monthly budgets count too', async () => {
    const hold = await worstCase();
    const u = await keyedUser(gw);
    const other = await gw.api('POST', '/api/token/', { name: 'other' }, u.token);
    const b = await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: u.keyId, period: 'monthly', limit: hold }, u.token);
    expect(b.status).toBe(200);
    expect(b.body.data.period_key).toBe(new Date().toISOString().slice(0, 7));
    up.queue.push({ text: 'ok', usage: { input: 10, output: 5 } });
    expect((await send(gw, u.key, msg('m'))).status).toBe(200);
    const r = await send(gw, u.key, msg('m'));
    expect([r.status, r.body.error.code]).toEqual([402, 'key_budget_exceeded']);
    expect((await send(gw, other.body.data.key, msg('m'))).status).toBe(200);
    const mine = await gw.api('GET', '/api/budget/self', undefined, u.token);
    expect(mine.body.data.budgets).toHaveLength(1);
    expect(mine.body.data.budgets[0]).toMatchObject({ id: b.body.data.id, spent: 15, remaining: hold - 15 });
    expect((await gw.api('DELETE', `/api/budget/${b.body.data.id}`, undefined, u.token)).status).toBe(200);
    expect((await send(gw, u.key, msg('m'))).status).toBe(200);
  });

  test('rights and validation: users cannot set user budgets nor touch others; bad bodies are 400, unknown subjects 404', async () => {
    const u = await keyedUser(gw);
    const v = await keyedUser(gw);
    const own = await gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: u.id, period: 'daily', limit: 10 }, u.token);
    expect([own.status, own.body.error.code]).toEqual([403, 'insufficient_role']);
    const theirs = await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: v.keyId, period: 'daily', limit: 10 }, u.token);
    expect([theirs.status, theirs.body.error.code]).toEqual([404, 'token_not_found']);
    for (const [body, param] of [
      [{ scope: 'team', subject_id: u.id, period: 'daily', limit: 10 }, 'scope'],
      [{ scope: 'user', subject_id: u.id, period: 'weekly', limit: 10 }, 'period'],
      [{ scope: 'user', subject_id: u.id, period: 'daily', limit: 0 }, 'limit'],
      [{ scope: 'user', subject_id: u.id, period: 'daily', limit: '5' }, 'limit'],
      [{ scope: 'user', period: 'daily', limit: 5 }, 'subject_id'],
    ] as const) {
      const r = await gw.api('PUT', '/api/budget/', body);
      expect([r.status, r.body.error.param]).toEqual([400, param]);
    }
    const missing = await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: 999_999, period: 'daily', limit: 5 });
    expect([missing.status, missing.body.error.code]).toEqual([404, 'token_not_found']);
    expect((await gw.api('DELETE', '/api/budget/999999')).status).toBe(404);
    expect((await gw.api('GET', '/api/budget/', undefined, u.token)).status).toBe(403);
  });

  test('hostile numbers: negative, fractional, past 2^53 or 1e15 limits and thresholds are 400; ids past 2^53 − 1 are 400, up to it unknown ones; 1e15 is taken', async () => {
    const u = await keyedUser(gw);
    const bad = (limit: unknown) => ({ scope: 'key', subject_id: u.keyId, period: 'daily', limit });
    for (const limit of [-5, 1.5, 2 ** 53 + 2, 1e16, 1e300, '1e3', null, true]) {
      const r = await gw.api('PUT', '/api/budget/', bad(limit), u.token);
      expect([limit, r.status, r.body.error?.param]).toEqual([limit, 400, 'limit']);
    }
    for (const threshold of [-1, 0.5, 2 ** 53 + 2, 1e16, '7']) {
      const r = await gw.api('PUT', '/api/budget/low_balance', { threshold }, u.token);
      expect([threshold, r.status, r.body.error?.param]).toEqual([threshold, 400, 'threshold']);
    }
    // An id past 2^53 − 1 cannot name a row: the same 400 on every backend (integer-bounds.test.ts), not a lookup.
    for (const id of [2 ** 53, 1e300]) {
      const r = await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: id, period: 'daily', limit: 5 });
      expect([id, r.status, r.body.error.code, r.body.error.param]).toEqual([id, 400, 'out_of_range', 'subject_id']);
      expect((await gw.api('PUT', '/api/budget/low_balance', { user_id: id, threshold: 5 })).body.error).toMatchObject({ code: 'out_of_range', param: 'user_id' });
    }
    expect((await gw.api('DELETE', `/api/budget/${2 ** 53}`)).body.error).toMatchObject({ code: 'out_of_range', param: 'id' });
    expect((await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: 2 ** 53 - 1, period: 'daily', limit: 5 })).body.error.code).toBe('token_not_found');
    expect((await gw.api('DELETE', `/api/budget/${2 ** 53 - 1}`)).status).toBe(404);
    const top = await gw.api('PUT', '/api/budget/', bad(1e15), u.token);
    expect(top.body.data).toMatchObject({ limit: 1e15, spent: 0, remaining: 1e15 });
    expect((await gw.api('GET', '/api/budget/self', undefined, u.token)).body.data.budgets[0].limit).toBe(1e15);
  });

  test('no existence oracle: a user touching another user\'s key, account or budget gets the 404 an unknown one gets', async () => {
    const u = await keyedUser(gw);
    const v = await keyedUser(gw);
    const vb = await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: v.keyId, period: 'daily', limit: 10 }, v.token);
    expect(vb.status).toBe(200);
    const strip = (r: { status: number; body: any }) => [r.status, r.body.error?.code, r.body.error?.param, r.body.error?.type];
    const pairs: Array<[string, string, unknown, unknown]> = [
      ['PUT', '/api/budget/', { scope: 'key', subject_id: v.keyId, period: 'daily', limit: 5 }, { scope: 'key', subject_id: 999_999_1, period: 'daily', limit: 5 }],
      ['PUT', '/api/budget/', { scope: 'user', subject_id: v.id, period: 'daily', limit: 5 }, { scope: 'user', subject_id: 999_999_1, period: 'daily', limit: 5 }],
      ['PUT', '/api/budget/low_balance', { user_id: v.id, threshold: 5 }, { user_id: 999_999_1, threshold: 5 }],
    ];
    for (const [method, path, existing, unknown] of pairs) {
      const a = await gw.api(method, path, existing, u.token);
      const b = await gw.api(method, path, unknown, u.token);
      expect(a.status).toBe(404);
      expect(strip(a)).toEqual(strip(b));
      expect(a.body.error.message.replace(/\d+/g, 'N')).toBe(b.body.error.message.replace(/\d+/g, 'N'));
    }
    const del = await gw.api('DELETE', `/api/budget/${vb.body.data.id}`, undefined, u.token);
    const delUnknown = await gw.api('DELETE', '/api/budget/9999991', undefined, u.token);
    expect(strip(del)).toEqual(strip(delUnknown));
    expect(del.status).toBe(404);
    // Nothing changed for v, and its own owner still manages it.
    const mine = await gw.api('GET', `/api/budget/user/${v.id}`);
    expect(mine.body.data.budgets.map((b: any) => b.limit)).toEqual([10]);
    expect(mine.body.data.low_balance_threshold).toBeNull();
  });

  test('an admin cannot raise or clear the user budget root set on it (its own key budgets and threshold stay its own)', async () => {
    const name = `adm${crypto.randomUUID().slice(0, 8)}`;
    const created = await gw.api('POST', '/api/user/', { username: name, password: 'admin-password-1', role: 10 });
    expect(created.status).toBe(200);
    const adminId = created.body.data.id as number;
    const admin = (await gw.services.auth.createAccessToken(adminId, 'adm')).token;
    const set = await gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: adminId, period: 'daily', limit: 10 });
    expect(set.status).toBe(200);
    const raise = await gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: adminId, period: 'daily', limit: 1_000_000 }, admin);
    expect([raise.status, raise.body.error?.code]).toEqual([403, 'role_too_high']);
    const monthly = await gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: adminId, period: 'monthly', limit: 1_000_000 }, admin);
    expect([monthly.status, monthly.body.error?.code]).toEqual([403, 'role_too_high']);
    const clear = await gw.api('DELETE', `/api/budget/${set.body.data.id}`, undefined, admin);
    expect([clear.status, clear.body.error?.code]).toEqual([403, 'role_too_high']);
    const left = await gw.api('GET', `/api/budget/user/${adminId}`);
    expect(left.body.data.budgets.map((b: any) => [b.scope, b.period, b.limit])).toEqual([['user', 'daily', 10]]);
    // What is its own as any owner's stays so: a key budget and the low-balance threshold.
    const key = await gw.api('POST', '/api/token/', { name: 'k' }, admin);
    expect((await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: key.body.data.id, period: 'daily', limit: 5 }, admin)).status).toBe(200);
    expect((await gw.api('PUT', '/api/budget/low_balance', { threshold: 5 }, admin)).status).toBe(200);
    // Root manages anyone, itself included.
    const rootId = (await gw.api('GET', '/api/user/self')).body.data.id as number;
    // Nor may it read root's: the refusal names the budgets (it used to say the admin "cannot manage keys").
    const rootBudgets = await gw.api('GET', `/api/budget/user/${rootId}`, undefined, admin);
    expect([rootBudgets.status, rootBudgets.body.error?.code]).toEqual([403, 'role_too_high']);
    expect(rootBudgets.body.error.message).toBe('You cannot see the budgets of a user whose role is equal to or above your own');
    const mine = await gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: rootId, period: 'monthly', limit: 1_000_000 });
    expect(mine.status).toBe(200);
    expect((await gw.api('DELETE', `/api/budget/${mine.body.data.id}`)).status).toBe(200);
    expect((await gw.api('DELETE', `/api/budget/${set.body.data.id}`)).status).toBe(200);
  });

  test('50/80/100 % are each announced once per period, signed, delivered at least once despite failures, and logged', async () => {
    receiver.seen.length = 0;
    receiver.failFirst = 2;
    const u = await keyedUser(gw);
    await gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: u.id, period: 'daily', limit: 1000 });
    const spend = async (n: number) => {
      up.queue.push({ text: 'ok', usage: { input: n, output: 0 } });
      expect((await send(gw, u.key, { ...msg('m'), max_tokens: 1 })).status).toBe(200);
    };
    await spend(400); // 40 %: nothing
    await spend(100); // 50 %
    await spend(350); // 85 %: 80 only
    await spend(10); // still 86 %: nothing new
    const rows = await gw.db.all("select type, payload from alert_outbox where payload like ? order by id", `%"user_id":${u.id},%`);
    const events = rows.map((r) => JSON.parse(r.payload));
    expect(events.map((e) => e.data.threshold)).toEqual([50, 80]);
    expect(events[1]).toMatchObject({ type: 'budget.threshold', data: { scope: 'user', user_id: u.id, period: 'daily', limit: 1000, spent: 850, threshold: 80 } });
    expect(events[0].id).toMatch(/^evt_[0-9a-f]{32}$/);
    // Delivered: the receiver failed twice, then every event arrived (at least once) with a valid signature.
    const deadline = Date.now() + 5000;
    while (Date.now() < deadline && !events.every((e) => receiver.seen.some((s) => s.id === e.id && s.status === 200))) await Bun.sleep(20);
    for (const e of events) {
      const got = receiver.seen.filter((s) => s.id === e.id);
      expect(got.some((s) => s.status === 200)).toBe(true);
      for (const s of got) {
        const m = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(s.sig)!;
        expect(m).not.toBeNull();
        expect(m[2]).toBe(createHmac('sha256', SECRET).update(`${m[1]}.${s.body}`).digest('hex'));
        expect(JSON.parse(s.body)).toEqual(e);
        expect(s.type).toBe('budget.threshold');
      }
    }
    expect(receiver.seen.filter((s) => s.status === 500)).toHaveLength(2);
    const listed = await gw.api('GET', '/api/budget/alerts?status=delivered');
    expect(listed.body.data.items.some((a: any) => a.event_id === events[0].id && a.attempts >= 1)).toBe(true);
    expect(gw.logs.some((l) => l.includes('alert.budget.threshold') && l.includes(events[1].id))).toBe(true);
    expect(gw.logs.some((l) => l.includes('alert.delivery_retry'))).toBe(true);
  });

  test('a low-balance threshold alerts when a charge crosses it, once, and again only after the balance rose above it', async () => {
    receiver.failFirst = 0;
    const u = await keyedUser(gw, 1000);
    const set = await gw.api('PUT', '/api/budget/low_balance', { threshold: 500 }, u.token);
    expect(set.body.data).toEqual({ user_id: u.id, low_balance_threshold: 500 });
    const spend = async (n: number) => {
      up.queue.push({ text: 'ok', usage: { input: n, output: 0 } });
      expect((await send(gw, u.key, { ...msg('m'), max_tokens: 1 })).status).toBe(200);
    };
    await spend(400); // 600
    await spend(200); // 400: crossed
    await spend(50); // 350: still below
    const low = async () => (await gw.db.all("select payload from alert_outbox where type = 'balance.low' and payload like ? order by id", `%"user_id":${u.id},%`)).map((r) => JSON.parse(r.payload).data);
    expect(await low()).toEqual([{ user_id: u.id, threshold: 500, balance: 400, request_id: expect.any(String) }]);
    await gw.services.ledger.apply({ userId: u.id, kind: 'topup', amount: 1000, ref: `more-${u.id}`, at: 2 });
    await spend(900); // 1350 → 450: crossed again
    expect((await low()).map((d) => d.balance)).toEqual([400, 450]);
    expect((await gw.api('GET', '/api/budget/self', undefined, u.token)).body.data.low_balance_threshold).toBe(500);
  });
});
