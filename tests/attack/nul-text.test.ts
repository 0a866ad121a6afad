/**
 * PostgreSQL text cannot hold NUL (U+0000); SQLite can. A NUL in a query value or path segment of a management
 * route answered 200 on SQLite and 400 `value_out_of_range` on PostgreSQL (the database refusing the bound
 * parameter). Now the front door refuses it on every /api route, on both backends alike, as a 400
 * `invalid_format` naming the field, after the credential and role checks.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
let user: { token: string };
beforeAll(async () => {
  gw = await startGateway();
  user = await makeUser(gw, 1);
}, 20_000);
afterAll(async () => { await gw.stop(); });

// [route with a NUL in one field, the field named in `param`]
const CASES: Array<[string, string]> = [
  ['/api/channel/?keyword=a%00b', 'keyword'],
  ['/api/channel/?tag=a%00', 'tag'],
  ['/api/channel/?type=%00', 'type'],
  ['/api/channel/?model=m%00', 'model'],
  ['/api/channel/?group=g%00', 'group'],
  ['/api/user/?keyword=a%00b', 'keyword'],
  ['/api/user/?group=g%00', 'group'],
  ['/api/token/?keyword=a%00b', 'keyword'],
  ['/api/topup/?provider=p%00', 'provider'],
  ['/api/topup/T%00X', 'trade_no'],
  ['/api/redemption/?batch=b%00', 'batch'],
  ['/api/log/?model=m%00', 'model'],
  ['/api/log/self?model=m%00', 'model'],
  ['/api/log/stats?model=m%00', 'model'],
  ['/api/log/export?model=m%00', 'model'],
  ['/api/log/?a%00b=1', 'a\u0000b'],
];

test('a NUL in a query value or path segment of an /api route is a 400 invalid_format naming the field', async () => {
  for (const [path, param] of CASES) {
    const res = await gw.api('GET', path);
    expect({ path, status: res.status, code: res.body.error?.code, param: res.body.error?.param, named: /NUL/.test(res.body.error?.message ?? '') })
      .toEqual({ path, status: 400, code: 'invalid_format', param, named: true });
  }
});

test('credentials and role are checked before the NUL', async () => {
  expect((await gw.api('GET', '/api/channel/?keyword=a%00b', undefined, null)).status).toBe(401);
  expect((await gw.api('GET', '/api/channel/?keyword=a%00b', undefined, user.token)).status).toBe(403);
  // The caller's own routes still refuse it.
  expect((await gw.api('GET', '/api/log/self?model=m%00', undefined, user.token)).status).toBe(400);
});

test('the same values without the NUL are answered normally', async () => {
  for (const [path] of CASES) {
    const res = await gw.api('GET', path.replace(/%00/g, ''));
    expect({ path, status: res.status === 404 && path.startsWith('/api/topup/T') ? 200 : res.status }).toEqual({ path, status: 200 });
  }
});

test('a NUL in any string or key of an /api JSON body is a 400 naming the field, and nothing is stored', async () => {
  const channel = (over: Record<string, unknown>) => ({ name: 'ok', type: 'anthropic', base_url: 'http://127.0.0.1:9', key: 'sk-upstream', models: ['m'], ...over });
  const BODIES: Array<[string, string, unknown, string]> = [
    ['POST', '/api/channel/', channel({ name: 'a\u0000b' }), 'name'],
    ['POST', '/api/channel/', channel({ models: ['m', 'x\u0000'] }), 'models[1]'],
    ['POST', '/api/channel/', channel({ model_mapping: { 'k\u0000': 'm' } }), 'model_mapping.k\u0000'],
    ['PUT', '/api/user/self', { display_name: '\u0000' }, 'display_name'],
    ['POST', '/api/group/', { name: 'g\u0000' }, 'name'],
  ];
  for (const [method, path, body, param] of BODIES) {
    const res = await gw.api(method, path, JSON.stringify(body));
    expect({ path, status: res.status, code: res.body.error?.code, param: res.body.error?.param })
      .toEqual({ path, status: 400, code: 'invalid_format', param });
  }
  expect((await gw.api('GET', '/api/channel/')).body.data.items).toEqual([]);
});

test('which refusal a body with a NUL and another fault gets: the order of the checks holds', async () => {
  // The NUL is found by the same walk as lone surrogates and `__proto__` keys, but refused after them, after a
  // field of the wrong kind, and after a NUL in the URL; the first NUL in document order is the one named.
  const channel = (over: Record<string, unknown>) => ({ name: 'ok', type: 'anthropic', base_url: 'http://127.0.0.1:9', key: 'sk-upstream', models: ['m'], ...over });
  const CASES: Array<[string, string, string, { code: string; param: string; says: RegExp }]> = [
    ['POST', '/api/channel/', JSON.stringify(channel({ name: 'a\u0000', models: ['m', 'x\ud800'] })), { code: 'invalid_format', param: 'models[1]', says: /unpaired UTF-16 surrogate/ }],
    ['POST', '/api/channel/', `{"name":"a\\u0000","model_mapping":{"__proto__":"m"},"type":"anthropic","base_url":"http://127.0.0.1:9","key":"k","models":["m"]}`, { code: 'invalid_value', param: 'model_mapping.__proto__', says: /__proto__/ }],
    ['PUT', '/api/channel/', JSON.stringify({ id: 1, name: 'a\u0000', headers: 'x' }), { code: 'invalid_type', param: 'headers', says: /./ }],
    ['POST', '/api/channel/?x=%00', JSON.stringify(channel({ name: 'a\u0000' })), { code: 'invalid_format', param: 'x', says: /NUL/ }],
    ['POST', '/api/channel/', JSON.stringify(channel({ models: ['m', 'x\u0000'], model_mapping: { 'k\u0000': 'm' } })), { code: 'invalid_format', param: 'models[1]', says: /NUL/ }],
    ['POST', '/api/channel/', JSON.stringify(channel({ model_mapping: { 'k\u0000': 'm\u0000' } })), { code: 'invalid_format', param: 'model_mapping.k\u0000', says: /NUL/ }],
  ];
  for (const [method, path, body, want] of CASES) {
    const res = await gw.api(method, path, body);
    expect({ path, body, status: res.status, code: res.body.error?.code, param: res.body.error?.param, says: want.says.test(res.body.error?.message ?? '') })
      .toEqual({ path, body, status: 400, code: want.code, param: want.param, says: true });
  }
  // Credentials and role before a NUL in the body too.
  expect((await gw.api('POST', '/api/group/', JSON.stringify({ name: 'g\u0000' }), null)).status).toBe(401);
  expect((await gw.api('POST', '/api/group/', JSON.stringify({ name: 'g\u0000' }), user.token)).status).toBe(403);
  expect((await gw.api('GET', '/api/channel/')).body.data.items).toEqual([]);
});
