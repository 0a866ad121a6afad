/**
 * A body field of the wrong kind must be refused, not reshaped. Elysia copies a body's declared fields into an
 * object shaped by the schema before checking it, so `PUT /api/channel/` with `"headers": "x"` stored the headers
 * `{"0": "x"}` (a header named "0" sent upstream), and `"failure_rules": 1`, `"model_mapping": true` or
 * `"header_policy": []` answered 200 and replaced the channel's settings with empty ones. `"overrides": 1.5` was
 * refused, but as "overrides[0]: field is required".
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
let id: number;
beforeAll(async () => {
  gw = await startGateway();
  const res = await gw.api('POST', '/api/channel/', {
    name: 'kinds', type: 'anthropic', base_url: 'http://127.0.0.1:9', key: 'sk-upstream', models: ['m'],
    headers: { 'x-team': 'blue' }, model_mapping: { m: 'upstream-m' }, failure_rules: { statuses: '500-599' },
  });
  expect(res.status).toBe(200);
  id = res.body.data.id;
}, 20_000); // starting on PostgreSQL takes seconds on a loaded machine
afterAll(async () => { await gw.stop(); });

test('an object field sent as a string, number, boolean or array is a 400 naming it, and the channel keeps its settings', async () => {
  const before = (await gw.api('GET', `/api/channel/${id}`)).body.data;
  for (const field of ['headers', 'model_mapping', 'failure_rules', 'header_policy']) {
    for (const value of ['"x"', '1.5', 'true', '[]', '["a"]']) {
      const res = await gw.api('PUT', '/api/channel/', `{"id":${id},"${field}":${value}}`);
      expect({ field, value, status: res.status, code: res.body.error?.code, param: res.body.error?.param, message: res.body.error?.message })
        .toEqual({ field, value, status: 400, code: 'invalid_type', param: field, message: `${field}: Expected object` });
    }
  }
  expect((await gw.api('GET', `/api/channel/${id}`)).body.data).toEqual(before);
  expect(before.headers).toEqual({ 'x-team': 'blue' });
});

test('an array field sent as a number, string or object says so', async () => {
  for (const value of ['1.5', '"op"', '{}']) {
    const res = await gw.api('PUT', '/api/channel/', `{"id":${id},"overrides":${value}}`);
    expect({ value, status: res.status, param: res.body.error?.param, message: res.body.error?.message })
      .toEqual({ value, status: 400, param: 'overrides', message: 'overrides: Expected array' });
  }
});

test('right kinds still work: unknown fields are still dropped, missing optional ones still default', async () => {
  const res = await gw.api('PUT', '/api/channel/', { id, headers: { 'x-team': 'green' }, not_a_field: 1 });
  expect(res.status).toBe(200);
  expect(res.body.data.headers).toEqual({ 'x-team': 'green' });
  expect(res.body.data.not_a_field).toBeUndefined();
  const key = await gw.api('POST', '/api/token/', { name: 'defaults' });
  expect([key.status, key.body.data.unlimited_quota]).toEqual([200, true]);
});

test('an integer body field sent as a numeric string is refused as sent (no string-to-number coercion in bodies)', async () => {
  const mint = await gw.api('POST', '/api/user/access_token', '{"name":"n","expires_in_days":"30","current_password":"x"}');
  expect([mint.status, mint.body.error?.code, mint.body.error?.param]).toEqual([400, 'invalid_type', 'expires_in_days']);
  const revoke = await gw.api('POST', '/api/user/access_token/revoke', '{"ids":["1"],"current_password":"x"}');
  expect([revoke.status, revoke.body.error?.code, revoke.body.error?.param]).toEqual([400, 'invalid_type', 'ids[0]']);
});
