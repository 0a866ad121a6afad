/**
 * JSON can spell a lone UTF-16 surrogate (`"\ud800"`) that no stored text can hold. The gateway used to save
 * something else than what was sent, and differently per backend: U+FFFD in a text column (a price for model
 * "p\ufffd", a display name), the escape kept in a SQLite JSON column, and on PostgreSQL a JSON column refused it
 * as "A number in the request is outside the range the gateway stores". Now every such body is a 400 naming the
 * field, nothing is written, and a well-formed pair (an emoji spelled as two escapes) round-trips exactly.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
let user: { id: number };
beforeAll(async () => {
  gw = await startGateway();
  user = await makeUser(gw, 1);
}, 20_000); // starting on PostgreSQL takes seconds on a loaded machine
afterAll(async () => { await gw.stop(); });

const channel = (over: Record<string, unknown>) => ({ name: 'ok', type: 'anthropic', base_url: 'http://127.0.0.1:9', key: 'sk-upstream', models: ['m'], ...over });

// Raw JSON text: the escapes must reach the gateway as escapes (JSON.stringify would send them the same way).
const CASES: Array<[string, string, string, string]> = [
  ['POST', '/api/channel/', JSON.stringify(channel({ name: 'a\ud800b' })), 'name'],
  ['POST', '/api/channel/', JSON.stringify(channel({ models: ['m', 'x\udfff'] })), 'models[1]'],
  ['POST', '/api/channel/', JSON.stringify(channel({ model_mapping: { ['k\ud800']: 'm' } })), 'model_mapping.k\ud800'],
  ['PUT', '/api/pricing/', JSON.stringify({ model: 'p\ud800', input: 1, output: 1 }), 'model'],
  ['PUT', '/api/user/self', JSON.stringify({ display_name: '\udfff' }), 'display_name'],
  ['POST', '/api/group/', JSON.stringify({ name: 'g1', description: 'd\ud800' }), 'description'],
  ['POST', '/api/token/', JSON.stringify({ name: 'k\ud800' }), 'name'],
];

test('a lone surrogate anywhere in an /api body is a 400 naming the field, and nothing is stored', async () => {
  const self = (await gw.api('GET', '/api/user/self')).body.data;
  for (const [method, path, body, param] of CASES) {
    expect(body).toContain('\\u'); // sent as an escape
    const res = await gw.api(method, path, body);
    expect({ path, status: res.status, code: res.body.error?.code, param: res.body.error?.param, named: res.body.error?.message?.includes('unpaired UTF-16 surrogate') })
      .toEqual({ path, status: 400, code: 'invalid_format', param, named: true });
  }
  const note = await gw.api('POST', '/api/ledger/adjust', JSON.stringify({ user_id: user.id, amount: 5, note: 'n\ud800' }));
  expect([note.status, note.body.error?.param]).toEqual([400, 'note']);
  expect(await gw.services.ledger.sum(user.id)).toBe(0);
  expect((await gw.api('GET', '/api/channel/')).body.data.items).toEqual([]);
  expect((await gw.api('GET', '/api/group/')).body.data.map((g: any) => g.name)).not.toContain('g1');
  expect((await gw.api('GET', '/api/pricing/')).body.data.map((p: any) => p.model).filter((m: string) => m.startsWith('p'))).toEqual([]);
  expect((await gw.api('GET', '/api/user/self')).body.data.display_name).toBe(self.display_name);
});

test('a well-formed surrogate pair (an emoji as two escapes) is stored and read back exactly', async () => {
  const res = await gw.api('POST', '/api/channel/', '{"name":"c \\ud83d\\ude00","type":"anthropic","base_url":"http://127.0.0.1:9","key":"sk-upstream","models":["m\\ud83d\\ude00"]}');
  expect(res.status).toBe(200);
  const got = (await gw.api('GET', `/api/channel/${res.body.data.id}`)).body.data;
  expect([got.name, got.models]).toEqual(['c 😀', ['m😀']]);
});
