/**
 * A path parameter out of range (`GET /api/channel/0`, `DELETE /api/channel/1/keys/0`) is named in the error like any
 * other field: `param` is the parameter and the message starts with its name. Elysia validates a coerced path value
 * on its own and loses its name; the error said `property: …` with `param: ""` (a query value's name was already
 * recovered from the URL, a path value's was not).
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { createApp } from '../../apps/server/src/app';
import { startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

test('every integer path parameter out of range is named in param and message', async () => {
  const routes = createApp(gw.services).routes
    .filter((r) => ['GET', 'POST', 'PUT', 'DELETE'].includes(r.method) && r.path.startsWith('/api/') && r.path.includes('/:'));
  const seen: string[] = [];
  for (const r of routes) {
    const names = [...r.path.matchAll(/:([^/]+)/g)].map((m) => m[1]!);
    for (const name of names) {
      // This parameter 0 (below every id's minimum of 1), the others a valid 1.
      const path = r.path.replace(/:([^/]+)/g, (_, n: string) => (n === name ? '0' : '1'));
      const res = await gw.api(r.method, path, r.method === 'GET' || r.method === 'DELETE' ? undefined : {});
      if (res.status !== 400 || res.body.error?.code !== 'out_of_range') continue;
      seen.push(`${r.method} ${r.path} ${name}`);
      expect({ route: `${r.method} ${path}`, param: res.body.error.param, named: res.body.error.message.startsWith(`${name}: `) })
        .toEqual({ route: `${r.method} ${path}`, param: name, named: true });
    }
  }
  expect(seen).toEqual(expect.arrayContaining(['GET /api/channel/:id id', 'DELETE /api/channel/:id/keys/:keyId keyId', 'POST /api/channel/:id/keys/:keyId/enable id']));
  expect(seen.length).toBeGreaterThan(10);
});

test('an integer in a path or query is decimal digits: 0x1, 1e0, +1, " 1" and 1.0 are 400, not another spelling of 1', async () => {
  // Elysia's own check was Number.isInteger(+value): GET /api/user/0x1 answered user 1, ?page_size=1e1 a page of 10.
  for (const v of ['0x1', '1e0', '+1', '%201', '1.0', '0b1']) {
    const byPath = await gw.api('GET', `/api/user/${v}`);
    expect({ v, status: byPath.status, code: byPath.body.error?.code, param: byPath.body.error?.param }).toEqual({ v, status: 400, code: 'invalid_type', param: 'id' });
    const byQuery = await gw.api('GET', `/api/user/?page_size=${v}`);
    expect({ v, status: byQuery.status, param: byQuery.body.error?.param }).toEqual({ v, status: 400, param: 'page_size' });
  }
  expect((await gw.api('GET', '/api/user/1')).body.data.id).toBe(1);
  expect((await gw.api('GET', '/api/user/?page_size=1')).body.data.page_size).toBe(1);
  // Long digit strings are still numbers, judged past their spelling: beyond 2^53 − 1 out of range on every backend.
  expect((await gw.api('GET', '/api/user/99999999999999999999')).body.error).toMatchObject({ code: 'out_of_range', param: 'id' });
});
