/**
 * Every /api body is a JSON object. Elysia's validator copies the declared fields of a body into a fresh
 * object before checking it, so an array, string, number or boolean body was read as `{}`: on a route whose
 * fields are all optional (PUT /api/user/self) it answered 200 as a successful no-op, elsewhere it named a
 * missing field instead of the real mistake. Each must be a 400 `invalid_type` that says what is wrong.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { createApp } from '../../apps/server/src/app';
import { startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
// Starting a gateway on PostgreSQL takes seconds on a loaded machine.
beforeAll(async () => { gw = await startGateway(); }, 20_000);
afterAll(async () => { await gw.stop(); });

const NOT_OBJECTS = ['[]', '[{"display_name":"Changed"}]', '"text"', '12345', 'true', 'null'];

test('a body that is not a JSON object is refused on PUT /api/user/self, and nothing changes', async () => {
  const before = (await gw.api('GET', '/api/user/self')).body.data;
  for (const body of NOT_OBJECTS) {
    const res = await gw.api('PUT', '/api/user/self', body);
    expect({ body, status: res.status, code: res.body.error?.code, message: res.body.error?.message, success: res.body.success })
      .toEqual({ body, status: 400, code: 'invalid_type', message: 'Request body must be a JSON object', success: false });
  }
  expect((await gw.api('GET', '/api/user/self')).body.data).toEqual(before);
});

test('every /api route that takes a JSON body refuses one that is not an object', async () => {
  const routes = createApp(gw.services).routes.filter((r) => ['POST', 'PUT', 'DELETE'].includes(r.method) && r.path.startsWith('/api/')
    && !r.path.endsWith('/webhook') && !r.path.endsWith('/logout') && (r as any).hooks?.body);
  expect(routes.length).toBeGreaterThan(30);
  const wrong: string[] = [];
  for (const r of routes) {
    for (const body of ['[{}]', '"x"', '7']) {
      const res = await gw.api(r.method, r.path.replace(/:[^/]+/g, '1'), body);
      if (res.status !== 400 || res.body.error?.code !== 'invalid_type') wrong.push(`${r.method} ${r.path} ${body}: ${res.status} ${res.body.error?.code}`);
    }
  }
  expect(wrong).toEqual([]);
}, 30_000);

test('an object body still works', async () => {
  const res = await gw.api('PUT', '/api/user/self', { display_name: 'Object Body' });
  expect(res.status).toBe(200);
  expect(res.body.data.display_name).toBe('Object Body');
});
