import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

test('admin CRUD of prices; integers only; users cannot touch them', async () => {
  const put = await gw.api('PUT', '/api/pricing/', { model: 'p1', input: 3_000_000, output: 15_000_000, cache_read: 300_000 });
  expect(put.status).toBe(200);
  expect(put.body.data).toMatchObject({ model: 'p1', input: 3_000_000, output: 15_000_000, cache_read: 300_000, cache_write: 0, audio_input: 0, audio_output: 0 });
  expect(gw.services.relay.prices.get('p1')!.output).toBe(15_000_000);
  await gw.api('PUT', '/api/pricing/', { model: 'p1', input: 1, output: 2 });
  expect(gw.services.relay.prices.get('p1')!.input).toBe(1); // the in-memory book follows writes at once
  expect((await gw.api('GET', '/api/pricing/p1')).body.data.output).toBe(2);
  expect((await gw.api('GET', '/api/pricing/')).body.data.map((p: any) => p.model)).toContain('p1');
  const frac = await gw.api('PUT', '/api/pricing/', { model: 'p2', input: 1.5, output: 2 });
  expect(frac.status).toBe(400);
  expect(frac.body.error.param).toBe('input');
  expect((await gw.api('PUT', '/api/pricing/', { model: 'p2', input: '5', output: 2 })).status).toBe(400);
  expect((await gw.api('PUT', '/api/pricing/', { model: 'p2', input: -1, output: 2 })).status).toBe(400);
  // Names a URL path resolves away (GET/DELETE /api/pricing/.. would reach another route): refused.
  for (const model of ['.', '..']) {
    const dot = await gw.api('PUT', '/api/pricing/', { model, input: 1, output: 2 });
    expect(dot.status).toBe(400);
    expect(dot.body.error.param).toBe('model');
  }
  expect((await gw.api('PUT', '/api/pricing/', { model: '...', input: 1, output: 2 })).status).toBe(200);
  const u = await makeUser(gw);
  expect((await gw.api('GET', '/api/pricing/', undefined, u.token)).status).toBe(403);
  expect((await gw.api('PUT', '/api/pricing/', { model: 'x', input: 1, output: 1 }, u.token)).status).toBe(403);
  expect((await gw.api('PUT', '/api/pricing/', { model: 'x', input: 1, output: 1 }, null)).status).toBe(401);
  expect((await gw.api('DELETE', '/api/pricing/p1')).status).toBe(200);
  expect(gw.services.relay.prices.get('p1')).toBeUndefined();
  const gone = await gw.api('GET', '/api/pricing/p1');
  expect(gone.status).toBe(404);
  expect(gone.body.error.code).toBe('price_not_found');
  expect((await gw.api('DELETE', '/api/pricing/p1')).status).toBe(404);
});

test('context_window: optional, null = the BILLING_DEFAULT_CONTEXT_TOKENS default, strict positive integer, in the OpenAPI schema', async () => {
  const plain = await gw.api('PUT', '/api/pricing/', { model: 'cw', input: 1, output: 2 });
  expect(plain.body.data.context_window).toBeNull();
  const set = await gw.api('PUT', '/api/pricing/', { model: 'cw', input: 1, output: 2, context_window: 32_000 });
  expect(set.status).toBe(200);
  expect(set.body.data.context_window).toBe(32_000);
  expect(gw.services.relay.prices.get('cw')!.contextWindow).toBe(32_000);
  for (const bad of [0, -1, 1.5, '32000', 1e12]) {
    const r = await gw.api('PUT', '/api/pricing/', { model: 'cw', input: 1, output: 2, context_window: bad });
    expect(r.status).toBe(400);
    expect(r.body.error.param).toBe('context_window');
  }
  const doc = (await gw.api('GET', '/openapi/json')).body;
  // The body schema is named in components (PriceInput) and referenced by the operation.
  const body = doc.paths['/api/pricing/'].put.requestBody.content['application/json'].schema;
  expect(JSON.stringify(doc.components.schemas[body.$ref.split('/').pop()])).toContain('context_window');
});
