/**
 * A model_mapping entry named `__proto__` is refused at channel create and update with a 400 naming the field.
 * Before, the key was dropped without a word on its way in (the body normalizer copies records by assignment,
 * which sets a prototype instead of adding the key): the channel was created, and requests for `__proto__` went
 * upstream unmapped. The request body is raw JSON, as a client sends it (a JS literal `{ __proto__: … }` carries
 * no such key). A `__proto__` model name without a mapping, and a mapping to `__proto__`, are left alone. Every /api
 * body is held to the same rule (tests/e2e/proto-keys.test.ts).
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import type { TestGateway } from '../helpers/gateway';
import { makeUser, startGateway } from '../helpers/gateway';
import { keyedUser, msg, send, setPrice, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
let oai: Scripted;
beforeAll(async () => {
  gw = await startGateway();
  oai = upstream('openai');
  await setPrice(gw, '__proto__');
});
afterAll(async () => { await gw.stop(); await oai.stop(); });

async function raw(method: string, path: string, json?: string, token: string | null = gw.rootToken) {
  const auth: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
  const res = await fetch(gw.url + path, { method, headers: { ...auth, 'content-type': 'application/json' }, body: json });
  return { status: res.status, body: await res.json() as any };
}

const REFUSED = { type: 'invalid_request_error', message: 'model_mapping.__proto__: "__proto__" cannot be used as a key (it would be dropped, not stored)', param: 'model_mapping.__proto__' };
const channel = (extra: string) => `{"name":"proto","type":"openai","base_url":"${oai.url}","key":"upstream-key","models":["__proto__","m"],"timeout_ms":5000${extra}}`;

test('create and update refuse a __proto__ mapping key with a 400; nothing is stored or changed', async () => {
  const before = await gw.db.get('select count(*) as n from channels');
  const created = await raw('POST', '/api/channel/', channel(',"model_mapping":{"__proto__":"x"}'));
  expect(created.status).toBe(400);
  expect(created.body.error).toMatchObject(REFUSED);
  expect(await gw.db.get('select count(*) as n from channels')).toEqual(before);

  const ok = await raw('POST', '/api/channel/', channel(',"model_mapping":{"m":"__proto__"}'));
  expect(ok.status).toBe(200);
  const id = ok.body.data.id as number;
  const updated = await raw('PUT', '/api/channel/', `{"id":${id},"model_mapping":{"m":"y","__proto__":"x"}}`);
  expect(updated.status).toBe(400);
  expect(updated.body.error).toMatchObject(REFUSED);
  expect((await raw('GET', `/api/channel/${id}`)).body.data.model_mapping).toEqual({ m: '__proto__' });

  // The model name itself is fine: unmapped it goes upstream as is, and a mapping to it applies.
  const u = await keyedUser(gw);
  expect((await send(gw, u.key, msg('__proto__'))).status).toBe(200);
  expect(oai.last().body.model).toBe('__proto__');
  await setPrice(gw, 'm');
  expect((await send(gw, u.key, msg('m'))).status).toBe(200);
  expect(oai.last().body.model).toBe('__proto__');
}, 20_000);

test('the role check comes first: a __proto__ mapping key from an anonymous caller gets 401, from a plain user 403', async () => {
  const bad = channel(',"model_mapping":{"__proto__":"a"}');
  const user = await makeUser(gw, 1);
  for (const [method, body] of [['POST', bad], ['PUT', '{"id":1,"model_mapping":{"__proto__":"a"}}']] as const) {
    const anon = await raw(method, '/api/channel/', body, null);
    expect([method, anon.status, anon.body.error?.code]).toEqual([method, 401, 'not_logged_in']);
    const plain = await raw(method, '/api/channel/', body, user.token);
    expect([method, plain.status, plain.body.error?.code]).toEqual([method, 403, 'insufficient_role']);
    const admin = await raw(method, '/api/channel/', body);
    expect([method, admin.status, admin.body.error]).toMatchObject([method, 400, REFUSED]);
  }
}, 20_000);
