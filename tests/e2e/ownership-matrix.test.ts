/**
 * The ownership matrix: every management route a plain user may call, called by user B with user A's object in
 * it. Routes are enumerated from the app; each is either given a way to name A's object below or listed as
 * naming none (it acts on the caller alone), so a route added later fails here until it is classified. B must
 * get the 404 of an unknown id (no oracle), and A's objects must be untouched and still work afterwards.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { createApp } from '../../apps/server/src/app';
import { PUBLIC_API_ROUTES } from '../../apps/server/src/plugins/openapi';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); }, 30_000);
afterAll(async () => { await gw.stop(); }, 30_000);

type Victim = { id: number; token: string; keyId: number; accessTokenId: number; sessionId: string; cookie: string; tradeNo: string; budgetId: number };
type Call = { method: string; path: string; body?: unknown };

/**
 * How B names A's object on each route that takes one, and the 404 code an unknown one gets. Ending a credential other
 * than the calling one needs the caller's own password (`reauth`): B gives it, so what is left to answer is whose it is.
 */
const NAMING: Record<string, { call: (v: Victim) => Call; code: string; reauth?: true }> = {
  'GET /api/token/:id': { call: (v) => ({ method: 'GET', path: `/api/token/${v.keyId}` }), code: 'token_not_found' },
  'PUT /api/token': { call: (v) => ({ method: 'PUT', path: '/api/token/', body: { id: v.keyId, status: 2 } }), code: 'token_not_found' },
  'DELETE /api/token/:id': { call: (v) => ({ method: 'DELETE', path: `/api/token/${v.keyId}` }), code: 'token_not_found' },
  'DELETE /api/user/access_token/:id': { call: (v) => ({ method: 'DELETE', path: `/api/user/access_token/${v.accessTokenId}` }), code: 'token_not_found', reauth: true },
  'POST /api/user/access_token/revoke': { call: (v) => ({ method: 'POST', path: '/api/user/access_token/revoke', body: { ids: [v.accessTokenId] } }), code: 'token_not_found', reauth: true },
  'DELETE /api/user/session/:id': { call: (v) => ({ method: 'DELETE', path: `/api/user/session/${v.sessionId}` }), code: 'session_not_found', reauth: true },
  'GET /api/topup/:trade_no': { call: (v) => ({ method: 'GET', path: `/api/topup/${v.tradeNo}` }), code: 'order_not_found' },
  'PUT /api/budget': { call: (v) => ({ method: 'PUT', path: '/api/budget/', body: { scope: 'key', subject_id: v.keyId, period: 'daily', limit: 1 } }), code: 'token_not_found' },
  'DELETE /api/budget/:id': { call: (v) => ({ method: 'DELETE', path: `/api/budget/${v.budgetId}` }), code: 'budget_not_found' },
  'PUT /api/budget/low_balance': { call: (v) => ({ method: 'PUT', path: '/api/budget/low_balance', body: { user_id: v.id, threshold: 1 } }), code: 'user_not_found' },
};

/** Routes of a plain user that name no other object: they act on the caller (or are listings scoped to it). */
const CALLER_ONLY = new Set([
  'PUT /api/user/self', 'GET /api/user/self', 'POST /api/user/logout', 'GET /api/user/session', 'POST /api/user/session/end_others',
  'GET /api/user/access_token', 'POST /api/user/access_token', 'POST /api/user/password',
  'GET /api/user/2fa/status', 'POST /api/user/2fa/setup', 'POST /api/user/2fa/enable', 'POST /api/user/2fa/disable', 'POST /api/user/2fa/backup_codes',
  'GET /api/token', 'POST /api/token', 'POST /api/topup', 'GET /api/topup/info', 'GET /api/topup/self', 'POST /api/user/redeem',
  'GET /api/ledger/self', 'GET /api/budget/self', 'GET /api/log/self', 'GET /api/log/stats/self', 'GET /api/log/export/self',
]);

const key = (r: { method: string; path: string }) => `${r.method} ${r.path.replace(/\/$/, '')}`;

async function victim(): Promise<Victim> {
  const a = await makeUser(gw);
  const k = await gw.api('POST', '/api/token/', { name: 'a-key' }, a.token);
  const login = await fetch(`${gw.url}/api/user/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: a.username, password: a.password }) });
  const cookie = login.headers.get('set-cookie')!.split(';')[0]!;
  const sessions = await (await fetch(`${gw.url}/api/user/session`, { headers: { cookie } })).json() as { data: Array<{ id: string }> };
  const tokens = await gw.api('GET', '/api/user/access_token', undefined, a.token);
  const at = Math.floor(Date.now() / 1000);
  const order = await gw.services.stores.topupOrders.insert({
    tradeNo: `tp_own${crypto.randomUUID().replace(/-/g, '').slice(0, 16)}`, userId: a.id, provider: 'providerA', amount: 500, currency: 'usd',
    credit: 5000, status: 'pending', providerRef: '', checkoutUrl: '', createdAt: at, updatedAt: at,
  });
  const budget = await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: k.body.data.id, period: 'daily', limit: 500 }, a.token);
  expect([k.status, login.status, budget.status]).toEqual([200, 200, 200]);
  return {
    id: a.id, token: a.token, keyId: k.body.data.id, accessTokenId: tokens.body.data[0].id, sessionId: sessions.data[0]!.id, cookie,
    tradeNo: order.tradeNo, budgetId: budget.body.data.id,
  };
}

test("user B naming user A's object on any user route gets the unknown id's 404, and A's things stay as they were", async () => {
  const routes = createApp(gw.services).routes
    .filter((r) => r.path.startsWith('/api/') && ['GET', 'POST', 'PUT', 'DELETE', 'PATCH'].includes(r.method) && !PUBLIC_API_ROUTES.has(key(r)));
  const b = await makeUser(gw);
  const a = await victim();
  const userRoutes: string[] = [];
  for (const r of routes) {
    // Logout would end B's token (it is B's own credential: caller-only by definition).
    if (key(r) === 'POST /api/user/logout') {
      userRoutes.push(key(r));
      continue;
    }
    const probe = await gw.api(r.method, r.path.replace(/:[^/]+/g, '999999'), r.method === 'GET' || r.method === 'DELETE' ? undefined : {}, b.token);
    if (probe.body?.error?.code !== 'insufficient_role') userRoutes.push(key(r));
  }
  // Every route a plain user reaches is classified: it names another object (tested below) or only the caller.
  const unclassified = userRoutes.filter((k) => !NAMING[k] && !CALLER_ONLY.has(k));
  expect(unclassified).toEqual([]);
  expect(Object.keys(NAMING).filter((k) => !userRoutes.includes(k))).toEqual([]);

  for (const [route, { call, code, reauth }] of Object.entries(NAMING)) {
    const c = call(a);
    const r = await gw.api(c.method, c.path, reauth ? { ...(c.body as object | undefined), current_password: b.password } : c.body, b.token);
    expect({ route, status: r.status, code: r.body.error?.code }).toEqual({ route, status: 404, code });
  }
  // Nothing of A's changed: its key is enabled with its budget, its session, access token and order are there.
  const keyNow = await gw.api('GET', `/api/token/${a.keyId}`, undefined, a.token);
  expect({ status: keyNow.status, keyStatus: keyNow.body.data.status }).toEqual({ status: 200, keyStatus: 1 });
  const budgets = (await gw.api('GET', '/api/budget/self', undefined, a.token)).body.data;
  expect(budgets.budgets.map((x: { id: number; limit: number }) => [x.id, x.limit])).toEqual([[a.budgetId, 500]]);
  expect(budgets.low_balance_threshold).toBeNull();
  expect((await fetch(`${gw.url}/api/user/self`, { headers: { cookie: a.cookie } })).status).toBe(200);
  expect((await gw.api('GET', '/api/user/self', undefined, a.token)).status).toBe(200);
  expect((await gw.api('GET', `/api/topup/${a.tradeNo}`, undefined, a.token)).status).toBe(200);
  // Three routes check B's password (a deliberate slow hash each) before answering.
}, 20_000);
