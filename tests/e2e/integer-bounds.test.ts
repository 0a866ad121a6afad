/**
 * An integer a client sends past 2^53 − 1 gets one answer on every backend: 400 `out_of_range` naming the field.
 * Before, `GET /api/channel/12345678901234567890` was 404 on SQLite (a lookup of the rounded number found nothing)
 * and 400 `value_out_of_range` on PostgreSQL (bigint refused it); likewise an id in a query (`?user_id=`, an empty
 * page vs 400), in a body (`PUT /api/user/` `id`, the channel batch's `ids`), a `role` filter past 2^31 − 1, and an
 * API key's `expires_at` of 1e19 (stored on SQLite, refused by PostgreSQL). The route table is walked, so a route
 * added later with an unbounded integer fails here.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { Kind } from '@sinclair/typebox';
import { createApp } from '../../apps/server/src/app';
import { startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
let routes: any[];
beforeAll(async () => {
  gw = await startGateway();
  routes = (createApp(gw.services).routes as any[]).filter((r) => ['GET', 'POST', 'PUT', 'DELETE'].includes(r.method) && r.path.startsWith('/api/'));
});
afterAll(async () => { await gw.stop(); });

const MAX = Number.MAX_SAFE_INTEGER;
/** 2^53, 20 digits, 2^63 (past bigint) and a digit string no double holds (Infinity). */
const TOO_LARGE = ['9007199254740992', '12345678901234567890', '9223372036854775808', '9'.repeat(400)];

/** Every integer schema under `schema` (unions, arrays and nested objects included), with where it is. */
function integers(schema: any, at: string, out: Array<{ at: string; s: any }> = []): Array<{ at: string; s: any }> {
  if (!schema || typeof schema !== 'object') return out;
  if (schema[Kind] === 'Integer') out.push({ at, s: schema });
  for (const k of ['items', 'anyOf', 'allOf', 'oneOf', 'additionalProperties', 'not']) {
    const v = schema[k];
    if (Array.isArray(v)) v.forEach((x) => integers(x, at, out));
    else if (v && typeof v === 'object') integers(v, k === 'items' ? `${at}[]` : at, out);
  }
  for (const [name, v] of Object.entries(schema.properties ?? {})) integers(v, at ? `${at}.${name}` : name, out);
  return out;
}

/** Names of a route's path or query parameters whose schema is an integer. */
const integerFields = (r: any, kind: 'params' | 'query') =>
  Object.entries(r.hooks?.[kind]?.properties ?? {}).filter(([, s]) => integers(s, '').length > 0).map(([n]) => n);

test('every integer a route takes (path, query, body) is bounded within ±(2^53 − 1) by its schema', () => {
  const unbounded: string[] = [];
  let seen = 0;
  for (const r of routes) {
    for (const kind of ['params', 'query', 'body'] as const) {
      for (const { at, s } of integers(r.hooks?.[kind], kind)) {
        seen++;
        const max = s.maximum ?? s.exclusiveMaximum;
        const min = s.minimum ?? s.exclusiveMinimum;
        if (!(typeof max === 'number' && max <= MAX && typeof min === 'number' && min >= -MAX)) unbounded.push(`${r.method} ${r.path} ${at}`);
      }
    }
  }
  expect(unbounded).toEqual([]);
  expect(seen).toBeGreaterThan(50);
});

test('an integer path parameter past 2^53 − 1 is 400 out_of_range naming it, on every route', async () => {
  const seen: string[] = [];
  for (const r of routes) {
    for (const name of integerFields(r, 'params')) {
      for (const v of TOO_LARGE) {
        const path = r.path.replace(/:([^/]+)/g, (_: string, n: string) => (n === name ? v : '1'));
        const res = await gw.api(r.method, path, r.method === 'GET' || r.method === 'DELETE' ? undefined : {});
        expect({ route: `${r.method} ${r.path}`, v: v.slice(0, 24), status: res.status, code: res.body.error?.code, param: res.body.error?.param })
          .toEqual({ route: `${r.method} ${r.path}`, v: v.slice(0, 24), status: 400, code: 'out_of_range', param: name });
      }
      seen.push(`${r.method} ${r.path} ${name}`);
    }
  }
  expect(seen).toEqual(expect.arrayContaining(['GET /api/channel/:id id', 'GET /api/user/:id id', 'DELETE /api/token/:id id', 'POST /api/channel/:id/keys/:keyId/enable keyId', 'DELETE /api/user/access_token/:id id']));
  // The largest id that can exist is looked up like any other, and leading zeros are still its decimal spelling.
  expect((await gw.api('GET', `/api/channel/${MAX}`)).body.error?.code).toBe('channel_not_found');
  expect((await gw.api('GET', '/api/user/0001')).body.data?.id).toBe(1);
  for (const v of ['0', '-1', `-${TOO_LARGE[1]}`]) expect((await gw.api('GET', `/api/user/${v}`)).body.error).toMatchObject({ code: 'out_of_range', param: 'id' });
  for (const v of ['1e3', '0x10']) expect((await gw.api('GET', `/api/user/${v}`)).body.error).toMatchObject({ code: 'invalid_type', param: 'id' });
});

test('an integer query parameter past 2^53 − 1 is 400 out_of_range naming it, on every route', async () => {
  const seen: string[] = [];
  for (const r of routes.filter((x) => x.method === 'GET')) {
    for (const name of integerFields(r, 'query')) {
      for (const v of TOO_LARGE) {
        const res = await gw.api('GET', `${r.path.replace(/:[^/]+/g, '1')}?${name}=${v}`);
        expect({ route: `GET ${r.path}`, name, v: v.slice(0, 24), status: res.status, code: res.body.error?.code, param: res.body.error?.param })
          .toEqual({ route: `GET ${r.path}`, name, v: v.slice(0, 24), status: 400, code: 'out_of_range', param: name });
      }
      seen.push(`${r.path} ${name}`);
    }
  }
  expect(seen).toEqual(expect.arrayContaining(['/api/token/ user_id', '/api/log/ user_id', '/api/log/ start_timestamp', '/api/ledger/ user_id', '/api/user/ role', '/api/log/stats channel_id', '/api/budget/ subject_id']));
  // An id up to 2^53 − 1 filters as before: nothing matches, an empty page on both backends.
  expect((await gw.api('GET', `/api/ledger/?user_id=${MAX}`)).body.data?.items).toEqual([]);
});

test('ids and times in bodies past 2^53 − 1 are 400 out_of_range naming the field, before any lookup', async () => {
  const bodies: Array<[string, string, (v: string) => string, string]> = [
    ['PUT', '/api/user/', (v) => `{"id":${v},"display_name":"x"}`, 'id'],
    ['PUT', '/api/channel/', (v) => `{"id":${v},"name":"x"}`, 'id'],
    ['POST', '/api/channel/batch', (v) => `{"ids":[${v}]}`, 'ids[0]'],
    ['PUT', '/api/group/', (v) => `{"id":${v},"ratio":1000}`, 'id'],
    ['PUT', '/api/token/', (v) => `{"id":${v},"name":"x"}`, 'id'],
    ['POST', '/api/token/', (v) => `{"name":"k","user_id":${v}}`, 'user_id'],
    ['POST', '/api/token/', (v) => `{"name":"k","expires_at":${v}}`, 'expires_at'],
    ['POST', '/api/ledger/adjust', (v) => `{"user_id":${v},"amount":1,"note":"x"}`, 'user_id'],
    ['PUT', '/api/budget/', (v) => `{"scope":"user","subject_id":${v},"period":"daily","limit":1}`, 'subject_id'],
    ['PUT', '/api/budget/low_balance', (v) => `{"user_id":${v},"threshold":1}`, 'user_id'],
    ['POST', '/api/user/access_token/revoke', (v) => `{"ids":[${v}],"current_password":"x"}`, 'ids[0]'],
  ];
  for (const [method, path, body, param] of bodies) {
    for (const v of ['9007199254740992', '12345678901234567890', '1e19', '1e400']) {
      const res = await gw.api(method, path, body(v));
      expect({ route: `${method} ${path} ${param}`, v, status: res.status, code: res.body.error?.code, param: res.body.error?.param })
        .toEqual({ route: `${method} ${path} ${param}`, v, status: 400, code: 'out_of_range', param });
    }
  }
  // No key was created with an expiry no backend agrees on.
  expect((await gw.api('GET', '/api/token/?page_size=100')).body.data.items.filter((k: any) => k.name === 'k')).toEqual([]);
});
