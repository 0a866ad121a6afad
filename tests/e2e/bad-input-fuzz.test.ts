/**
 * Bad input never gets a 5xx, an HTML/plain-text body or a half-written record: every route of the app
 * (from its own route table, so new routes are covered) receives a fixed set of hostile bodies and
 * path values, as root on /api and with a funded relay key on /v1, and must answer with a JSON error
 * object of four strings (or a success).
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { createApp } from '../../apps/server/src/app';
import { startGateway, type TestGateway } from '../helpers/gateway';
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
  expect({ what, status: r.status, fiveHundred: r.status >= 500 }).toEqual({ what, status: r.status, fiveHundred: false });
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

test('after all that, the root user and the ledger are intact', async () => {
  const self = await gw.api('GET', '/api/user/self');
  expect(self.body.data.role).toBe(100);
  for (const u of gw.services.users.list({ offset: 0, limit: 1000 }).items) expect(gw.services.ledger.sum(u.id)).toBe(u.quota);
});
