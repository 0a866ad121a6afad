/**
 * Bad input never gets a 5xx, an HTML/plain-text body or a half-written record: every route of the app
 * (from its own route table, so new routes are covered) receives a fixed set of hostile bodies and
 * path values, as root on /api and with a funded relay key on /v1, and must answer with a JSON error
 * object of four strings (or a success). Then extremes: 20,000-deep JSON from anyone, number edges and
 * NaN-like strings in every body and query field the route schemas name, malformed cookies and headers,
 * each answered within 50 ms.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { createApp } from '../../apps/server/src/app';
import { CLUSTER_NODES, startGateway, type TestGateway } from '../helpers/gateway';
import { keyedUser } from './relay-setup';

let gw: TestGateway;
let relayKey: string;
let routes: Array<{ method: string; path: string }>;

beforeAll(async () => {
  gw = await startGateway();
  relayKey = (await keyedUser(gw, 1_000_000)).key;
  routes = createApp(gw.services).routes
    .filter((r) => ['GET', 'POST', 'PUT', 'DELETE'].includes(r.method) && (r.path.startsWith('/api/') || r.path.startsWith('/v1/')))
    .filter((r) => r.path !== '/v1/realtime' && !r.path.endsWith('/logout') && !r.path.endsWith('/webhook'))
    .map((r) => ({ method: r.method, path: r.path }));
});
afterAll(async () => { await gw.stop(); });

const deep = (n: number): unknown => (n === 0 ? {} : { a: deep(n - 1) });
const BODIES: string[] = [
  'null', '[]', '"text"', '12345', 'true', '{"id":"x"}', '{"id":-1}', '{"id":1e308}', '{"id":1.5}',
  '{"ids":[1,"2",null]}', '{"username":{"$ne":null},"password":[]}', '{"model":"","messages":{},"max_tokens":-1}',
  JSON.stringify({ name: 'ü'.repeat(3000), email: 'a@b', quota: Number.MAX_SAFE_INTEGER * 4, tag: ['x'] }),
  JSON.stringify(deep(200)), '{"__proto__":{"admin":true},"constructor":{"prototype":{}}}',
];
const PATH_VALUES = ['0', '-1', 'abc', '99999999999999999999', '%00', '..%2f..'];

function expectWellFormed(r: { status: number; body: any; headers: Headers }, what: string) {
  const fiveHundred = r.status >= 500;
  expect({ what, status: r.status, fiveHundred }).toEqual({ what, status: r.status, fiveHundred: false });
  // Downloads (the usage log export) succeed with their own type; everything else, and every error, is JSON.
  const download = r.status < 300 && (r.headers.get('content-disposition') ?? '').startsWith('attachment');
  if (!download) expect({ what, type: r.headers.get('content-type') ?? '' }).toEqual({ what, type: expect.stringContaining('json') });
  if (r.status >= 400) {
    const e = r.body?.error;
    expect({ what, shape: e && ['message', 'type', 'param', 'code'].map((k) => typeof e[k]) }).toEqual({ what, shape: ['string', 'string', 'string', 'string'] });
  }
}

test('hostile bodies on every route: never a 5xx, always the JSON error object', async () => {
  const v1 = { 'x-api-key': relayKey, 'vendor-version': '2023-06-01' };
  let calls = 0;
  for (const r of routes) {
    const path = r.path.replace(/:[^/]+/g, '999999');
    const isV1 = r.path.startsWith('/v1/');
    for (const body of r.method === 'GET' || r.method === 'DELETE' ? [undefined] : BODIES) {
      const res = await gw.api(r.method, path, body, isV1 ? null : gw.rootToken, isV1 ? v1 : {});
      expectWellFormed(res, `${r.method} ${r.path} ${body?.slice(0, 40)}`);
      calls++;
    }
  }
  expect(calls).toBeGreaterThan(300);
}, 60_000);

test('hostile path values on every parameterised route', async () => {
  for (const r of routes.filter((x) => x.path.includes(':'))) {
    for (const v of PATH_VALUES) {
      const res = await gw.api(r.method, r.path.replace(/:[^/]+/g, v), r.method === 'GET' || r.method === 'DELETE' ? undefined : {}, r.path.startsWith('/v1/') ? null : gw.rootToken,
        r.path.startsWith('/v1/') ? { 'x-api-key': relayKey, 'vendor-version': '2023-06-01' } : {});
      expectWellFormed(res, `${r.method} ${r.path} with ${v}`);
    }
  }
});


// ---- Extremes: depth, size, numbers, cookies and headers, for every route of the table. ----

/** Values at the edges of what JSON, JavaScript numbers and SQLite integers can carry. */
const NUMBER_EXTREMES = ['1e308', '-1e308', '-0', '9007199254740993', '123456789012345678901234567890', '1e-320', '0.1', '-1'];
const NAN_LIKE = ['"NaN"', '"Infinity"', '"-Infinity"', '"1e308"', '"0x10"', '""'];
const QUERY_EXTREMES = ['1e308', '-0', '9007199254740993', '99999999999999999999999', 'NaN', 'Infinity', '-1', '1.5', '%00', ''];

/** Every route of the table, with the property names of its body and query schemas. */
function schemaFields(kind: 'body' | 'query'): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const r of createApp(gw.services).routes as any[]) out.set(`${r.method} ${r.path}`, Object.keys(r.hooks?.[kind]?.properties ?? {}));
  return out;
}

const timed = async (f: () => Promise<{ status: number; body: any; headers: Headers }>, retrySlow = true) => {
  const once = async () => {
    const t = performance.now();
    const r = await f();
    return { ...r, ms: performance.now() - t };
  };
  // A slow answer is asked again, after a growing pause, and the fastest counts: work proportional to the
  // input is slow every time, while a scheduling stall on a shared CI machine (or of the PostgreSQL server on
  // the same cores) passes. Retrying at once was measured not to be enough there: three answers in a row
  // over 50 ms happened under test:pg (a stall lasts longer than three quick requests), so the tries spread
  // over about a second.
  // Only where the time is asserted: behind the cluster harness's proxy a successful write waits for the change
  // feed (100 ms), and retrying each of those after pauses took one test past its 60 s.
  let best = await once();
  for (const pause of retrySlow ? [50, 200, 700] : []) {
    if (best.ms < 50) break;
    await Bun.sleep(pause);
    const next = await once();
    if (next.ms < best.ms) best = next;
  }
  return best;
};

/**
 * Routes whose handler verifies a password or hashes one: a well-formed body costs a deliberate hash (`PUT
 * /api/user/self` verifies `current_password` for root's own rename; ending another session or access token verifies it too).
 */
const HASHING = /\/api\/user\/(login|reset|password|2fa|access_token|session)|^(POST|PUT) \/api\/user\/$|^PUT \/api\/user\/self$/;

test('every body field of every route set to number extremes and NaN-like strings: never a 5xx', async () => {
  const fields = schemaFields('body');
  const v1 = { 'x-api-key': relayKey, 'vendor-version': '2023-06-01' };
  let calls = 0;
  const slow: string[] = [];
  for (const r of routes.filter((x) => x.method !== 'GET')) {
    const names = fields.get(`${r.method} ${r.path}`)?.length ? fields.get(`${r.method} ${r.path}`)! : ['id', 'model', 'max_tokens', 'amount', 'user_id'];
    const path = r.path.replace(/:[^/]+/g, '999999');
    const isV1 = r.path.startsWith('/v1/');
    for (const v of [...NUMBER_EXTREMES, ...NAN_LIKE]) {
      const body = `{${names.map((n) => `"${n}":${v}`).join(',')}}`;
      const hashing = HASHING.test(`${r.method} ${r.path}`);
      const res = await timed(() => gw.api(r.method, path, body, isV1 ? null : gw.rootToken, isV1 ? v1 : {}), CLUSTER_NODES === 1 && !hashing);
      expectWellFormed(res, `${r.method} ${r.path} ${body.slice(0, 60)}`);
      if (res.ms > 50 && !hashing) slow.push(`${r.method} ${r.path} ${v}: ${res.ms.toFixed(0)} ms`);
      calls++;
    }
  }
  expect(calls).toBeGreaterThan(300);
  // Behind the cluster harness's proxy a successful write waits for the change feed (100 ms) before it returns.
  if (CLUSTER_NODES === 1) expect(slow).toEqual([]);
}, 120_000); // each slow answer may be retried after pauses of up to 1 s in all

test('depth and size on every route: 400 json_too_deep or 413 within 50 ms, whoever sends it', async () => {
  const deepArr = '['.repeat(20_000) + ']'.repeat(20_000);
  const deepInField = `{"name":${'{"a":'.repeat(20_000)}1${'}'.repeat(20_000)},"messages":[]}`;
  const v1 = { 'x-api-key': relayKey, 'vendor-version': '2023-06-01' };
  for (const r of [...routes.filter((x) => x.method !== 'GET'), { method: 'POST', path: '/api/providerA/webhook' }, { method: 'POST', path: '/api/providerB/webhook' }]) {
    const path = r.path.replace(/:[^/]+/g, '999999');
    const isV1 = r.path.startsWith('/v1/');
    for (const [body, token] of [[deepArr, null], [deepArr, gw.rootToken], [deepInField, gw.rootToken]] as const) {
      const res = await timed(() => gw.api(r.method, path, body, isV1 ? null : token, isV1 ? v1 : {}));
      expectWellFormed(res, `${r.method} ${r.path} deep ${token ? 'auth' : 'anon'}`);
      expect({ route: `${r.method} ${r.path}`, fast: res.ms < 50 }).toEqual({ route: `${r.method} ${r.path}`, fast: true });
      if (res.status < 400) throw new Error(`${r.method} ${r.path} accepted a 20,000-deep body`);
    }
  }
});

test('query extremes on every GET route (every query field, and p/page_size/limit): never a 5xx', async () => {
  const fields = schemaFields('query');
  const v1 = { 'x-api-key': relayKey, 'vendor-version': '2023-06-01' };
  let calls = 0;
  for (const r of routes.filter((x) => x.method === 'GET')) {
    const names = [...new Set([...(fields.get(`GET ${r.path}`) ?? []), 'p', 'page_size', 'limit', 'id'])];
    const isV1 = r.path.startsWith('/v1/');
    for (const v of QUERY_EXTREMES) {
      const qs = names.map((n) => `${n}=${encodeURIComponent(v)}`).join('&');
      for (const one of [qs, ...names.map((n) => `${n}=${encodeURIComponent(v)}`)]) {
        const res = await timed(() => gw.api('GET', `${r.path.replace(/:[^/]+/g, '999999')}?${one}`, undefined, isV1 ? null : gw.rootToken, isV1 ? v1 : {}));
        expectWellFormed(res, `GET ${r.path}?${one}`);
        expect({ what: `GET ${r.path}?${one}`, fast: res.ms < 50 || res.ms }).toEqual({ what: `GET ${r.path}?${one}`, fast: true });
        calls++;
      }
    }
  }
  expect(calls).toBeGreaterThan(200);
}, 120_000); // each slow answer may be retried after pauses of up to 1 s in all

test('malformed cookies and headers on every route (including /health and login): never a 5xx', async () => {
  const all = [...createApp(gw.services).routes].filter((r) => ['GET', 'POST', 'PUT', 'DELETE'].includes(r.method) && r.path !== '/v1/realtime' && !r.path.startsWith('/openapi'));
  const headerSets: Array<Record<string, string>> = [
    { cookie: 'gw_session=%E0%A4%A' }, { cookie: 'gw_session=%' }, { cookie: 'gw_session=' }, { cookie: '=;;; ;=gw_session' },
    { cookie: `gw_session=${'a'.repeat(4000)}` }, { authorization: 'Bearer' }, { authorization: 'Bearer %E0%A4%A' }, { authorization: 'Basic ::::' },
    { 'x-api-key': '%E0%A4%A' }, { 'vendor-version': '99999-99-99' }, { 'anthropic-version': '1e308' },
    { 'content-type': 'application/json; charset=utf-16' }, { 'x-forwarded-for': '999.999.999.999, ::ffff:zz' }, { 'sec-fetch-site': '%E0' },
  ];
  let calls = 0;
  for (const r of all) {
    const path = r.path.replace(/:[^/]+/g, '999999');
    for (const h of headerSets) {
      const body = r.method === 'GET' || r.method === 'DELETE' ? undefined : '{}';
      const res = await timed(() => gw.api(r.method, path, body, null, h));
      if (r.path === '/health') expect(res.status).toBe(200);
      else expectWellFormed(res, `${r.method} ${r.path} ${JSON.stringify(h).slice(0, 60)}`);
      expect(res.ms).toBeLessThan(50);
      calls++;
    }
  }
  expect(calls).toBeGreaterThan(500);
}, 120_000); // each slow answer may be retried after pauses of up to 1 s in all

test('after all that, the root user and the ledger are intact', async () => {
  const self = await gw.api('GET', '/api/user/self');
  expect(self.body.data.role).toBe(100);
  for (const u of (await gw.services.users.list({ offset: 0, limit: 1000 })).items) expect(await gw.services.ledger.sum(u.id)).toBe(u.quota);
});
