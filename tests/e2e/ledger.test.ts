/** The ledger API: own and admin listings, admin adjustments with role rules; balance == ledger sum throughout. */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

const balance = async (userId: number) => (await gw.services.users.byId(userId))!.quota;
async function balanced(...ids: number[]) {
  for (const id of ids) expect(await balance(id)).toBe(await gw.services.ledger.sum(id));
}
const adjust = (body: Record<string, unknown>, token?: string) => gw.api('POST', '/api/ledger/adjust', body, token);

describe('POST /api/ledger/adjust', () => {
  test('root credits and debits; entries carry kind adjust, ref adjust:<uuid>, the note and the actor', async () => {
    const u = await makeUser(gw);
    const root = (await gw.services.users.byUsername('root'))!;
    const c = await adjust({ user_id: u.id, amount: 1000, note: 'welcome bonus' });
    expect(c.status).toBe(200);
    expect(c.body.data.balance).toBe(1000);
    expect(c.body.data.entry).toMatchObject({ user_id: u.id, kind: 'adjust', amount: 1000, balance_after: 1000, note: 'welcome bonus', actor_id: root.id });
    expect(c.body.data.entry.ref).toMatch(/^adjust:[0-9a-f-]{36}$/);
    const d = await adjust({ user_id: u.id, amount: -400, note: 'refund reversal' });
    expect(d.body.data).toMatchObject({ balance: 600, entry: { amount: -400, balance_after: 600 } });
    expect(d.body.data.entry.ref).not.toBe(c.body.data.entry.ref);
    expect(await balance(u.id)).toBe(600);
    const self = await gw.api('GET', '/api/user/self', undefined, u.token);
    expect(self.body.data.quota).toBe(600);
    await balanced(u.id);
  });

  test('a debit below zero is refused unless allow_negative is true', async () => {
    const u = await makeUser(gw);
    await adjust({ user_id: u.id, amount: 100, note: 'seed' });
    const r = await adjust({ user_id: u.id, amount: -101, note: 'too much' });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: 'insufficient_balance', param: 'amount' });
    expect(await balance(u.id)).toBe(100);
    expect((await adjust({ user_id: u.id, amount: -100, note: 'exactly all' })).body.data.balance).toBe(0);
    const neg = await adjust({ user_id: u.id, amount: -50, note: 'chargeback', allow_negative: true });
    expect(neg.status).toBe(200);
    expect(neg.body.data.balance).toBe(-50);
    await balanced(u.id);
  });

  test('concurrent debits cannot both pass the balance check', async () => {
    const u = await makeUser(gw);
    await adjust({ user_id: u.id, amount: 100, note: 'seed' });
    const rs = await Promise.all(Array.from({ length: 10 }, () => adjust({ user_id: u.id, amount: -30, note: 'race' })));
    expect(rs.filter((r) => r.status === 200)).toHaveLength(3);
    expect(rs.filter((r) => r.status === 400)).toHaveLength(7);
    expect(await balance(u.id)).toBe(10);
    await balanced(u.id);
  });

  test('bad input: zero, non-integer or string amount, missing or blank note, unknown user', async () => {
    const u = await makeUser(gw);
    for (const [body, param] of [
      [{ user_id: u.id, amount: 0, note: 'x' }, 'amount'],
      [{ user_id: u.id, amount: 1.5, note: 'x' }, 'amount'],
      [{ user_id: u.id, amount: '10', note: 'x' }, 'amount'],
      [{ user_id: u.id, amount: 10 }, 'note'],
      [{ user_id: u.id, amount: 10, note: '' }, 'note'],
      [{ user_id: u.id, amount: 10, note: '   ' }, 'note'],
      [{ amount: 10, note: 'x' }, 'user_id'],
    ] as Array<[Record<string, unknown>, string]>) {
      const r = await adjust(body);
      expect(r.status).toBe(400);
      expect(r.body.error.param).toBe(param);
    }
    const missing = await adjust({ user_id: 999999, amount: 10, note: 'x' });
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('user_not_found');
    expect(await balance(u.id)).toBe(0);
    await balanced(u.id);
  });

  test('role rules: users are refused; an admin adjusts users only, never itself, another admin or root; root adjusts admins', async () => {
    const user = await makeUser(gw);
    const admin = await makeUser(gw, 10);
    const admin2 = await makeUser(gw, 10);
    const root = (await gw.services.users.byUsername('root'))!;
    expect((await adjust({ user_id: user.id, amount: 5, note: 'self-serve' }, user.token)).status).toBe(403);
    expect((await adjust({ user_id: user.id, amount: 5, note: 'ok' }, admin.token)).status).toBe(200);
    for (const target of [admin.id, admin2.id, root.id]) {
      const r = await adjust({ user_id: target, amount: 5, note: 'nope' }, admin.token);
      expect(r.status).toBe(403);
      expect(r.body.error.code).toBe('insufficient_role');
    }
    expect((await adjust({ user_id: admin.id, amount: 7, note: 'root may' })).status).toBe(200);
    expect(await balance(admin.id)).toBe(7);
    expect(await balance(admin2.id)).toBe(0);
    expect((await gw.api('POST', '/api/ledger/adjust', { user_id: user.id, amount: 5, note: 'x' }, null)).status).toBe(401);
    await balanced(user.id, admin.id, admin2.id, root.id);
  });
});

describe('GET /api/ledger/self and /api/ledger/', () => {
  test('users list their own entries newest first, paged and filtered by kind', async () => {
    const u = await makeUser(gw);
    const other = await makeUser(gw);
    for (const amount of [10, 20, 30]) await adjust({ user_id: u.id, amount, note: `n${amount}` });
    await adjust({ user_id: other.id, amount: 99, note: 'other' });
    const now = Math.floor(Date.now() / 1000);
    await gw.services.ledger.apply({ userId: u.id, kind: 'topup', amount: 500, ref: `tp_ledgertest_${u.id}`, at: now });
    const all = await gw.api('GET', '/api/ledger/self', undefined, u.token);
    expect(all.status).toBe(200);
    expect(all.body.data).toMatchObject({ total: 4, page: 1, page_size: 20 });
    expect(all.body.data.items.map((e: any) => e.amount)).toEqual([500, 30, 20, 10]);
    expect(all.body.data.items.every((e: any) => e.user_id === u.id)).toBe(true);
    const page2 = await gw.api('GET', '/api/ledger/self?page_size=2&p=2', undefined, u.token);
    expect(page2.body.data.items.map((e: any) => e.amount)).toEqual([20, 10]);
    const adj = await gw.api('GET', '/api/ledger/self?kind=adjust', undefined, u.token);
    expect(adj.body.data.total).toBe(3);
    const top = await gw.api('GET', '/api/ledger/self?kind=topup', undefined, u.token);
    expect(top.body.data.items).toEqual([expect.objectContaining({ kind: 'topup', amount: 500, ref: `tp_ledgertest_${u.id}`, actor_id: null, balance_after: 560 })]);
    expect((await gw.api('GET', '/api/ledger/self?kind=bogus', undefined, u.token)).status).toBe(400);
    expect((await gw.api('GET', '/api/ledger/self', undefined, null)).status).toBe(401);
    await balanced(u.id, other.id);
  });

  test('admins list anyone (filter by user_id and kind); users are refused', async () => {
    const u = await makeUser(gw);
    const admin = await makeUser(gw, 10);
    await adjust({ user_id: u.id, amount: 42, note: 'for admin listing' });
    expect((await gw.api('GET', '/api/ledger/', undefined, u.token)).status).toBe(403);
    const r = await gw.api('GET', `/api/ledger/?user_id=${u.id}`, undefined, admin.token);
    expect(r.status).toBe(200);
    expect(r.body.data.total).toBe(1);
    expect(r.body.data.items[0]).toMatchObject({ user_id: u.id, amount: 42, note: 'for admin listing' });
    const every = await gw.api('GET', '/api/ledger/?kind=adjust&page_size=100', undefined, admin.token);
    expect(every.body.data.total).toBeGreaterThan(1);
    expect(new Set(every.body.data.items.map((e: any) => e.user_id)).size).toBeGreaterThan(1);
  });

  test('every balance in the database equals its ledger sum after all scenarios', async () => {
    const rows = (await gw.db.all('select u.id, u.quota, coalesce((select sum(amount) from ledger l where l.user_id = u.id), 0) as s from users u')) as Array<{ id: number; quota: number; s: number }>;
    expect(rows.length).toBeGreaterThan(5);
    for (const r of rows) expect(r.quota).toBe(r.s);
  });
});
