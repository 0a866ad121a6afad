/**
 * A route's Response goes out as the route built it: the request id (and any header) that `set` carries and the
 * Response already has no longer makes Elysia copy the Response into a new one over its body stream. What `set`
 * adds that the Response lacks still reaches the client, and the bytes on the wire are the same.
 */
import { afterAll, describe, expect, test } from 'bun:test';
import { Elysia } from 'elysia';
import { silentLogger } from '@gw/core';
import { httpErrors, requestIdOf } from './http-errors';
import { RouteTable } from './route-table';

const BODY = JSON.stringify({ type: 'message', content: [{ type: 'text', text: 'hi' }] });
const upstream = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response(BODY, { headers: { 'content-type': 'application/json', 'x-upstream': '1' } }) });

/** Counts every Response built while serving (the route's own and any copy), without changing what Elysia sees. */
const Original = globalThis.Response;
let built = 0;
class CountingResponse extends Original {
  constructor(...args: ConstructorParameters<typeof Response>) {
    super(...args);
    built++;
  }
}
Object.defineProperty(CountingResponse, 'name', { value: 'Response' });

/** The route table answers only unknown routes (404/405), which these tests do not ask for. */
let routes: Array<{ method: string; path: string }> = [];
const app = new Elysia()
  .use(httpErrors({ table: () => new RouteTable(routes), log: silentLogger }))
  // As the relay answers: its own request id and content-type among its headers.
  .get('/own-id', ({ request }) => new Response(BODY, { headers: { 'content-type': 'application/json', 'request-id': requestIdOf(request) } }))
  // No request id of its own: `set` must still add it.
  .get('/no-id', () => new Response(BODY, { headers: { 'content-type': 'application/json' } }))
  // A header only on `set`, beside the id the Response has.
  .get('/set-extra', ({ request, set }) => {
    set.headers['x-extra'] = 'yes';
    return new Response(BODY, { headers: { 'content-type': 'application/json', 'request-id': requestIdOf(request) } });
  })
  // A status only on `set`.
  .get('/set-status', ({ request, set }) => {
    set.status = 201;
    return new Response(BODY, { headers: { 'content-type': 'application/json', 'request-id': requestIdOf(request) } });
  })
  // No content-type: Elysia's copy sends application/octet-stream, as before.
  .get('/no-type', ({ request }) => new Response(BODY, { headers: { 'request-id': requestIdOf(request) } }))
  // A fetched Response, whose headers cannot be changed.
  .get('/fetched', async () => await fetch(`http://127.0.0.1:${upstream.port}/`))
  .listen({ port: 0, hostname: '127.0.0.1' });
routes = app.routes;
const base = `http://127.0.0.1:${app.server!.port}`;
afterAll(async () => {
  globalThis.Response = Original;
  await app.stop(true);
  upstream.stop(true);
});

describe('a route\'s Response is sent as built when `set` adds nothing to it', () => {
  test('an answer that carries its request id and content-type is sent without a second Response', async () => {
    await (await fetch(`${base}/own-id`)).text(); // Elysia compiles the route at its first request
    globalThis.Response = CountingResponse as typeof Response;
    built = 0;
    let res: Response;
    try {
      res = await fetch(`${base}/own-id`);
    } finally {
      globalThis.Response = Original;
    }
    expect(await res.text()).toBe(BODY);
    expect(built).toBe(1);
  });

  test('over HTTP: status, headers and bytes as before, and what only `set` has still arrives', async () => {
    const own = await fetch(`${base}/own-id`);
    expect({ status: own.status, type: own.headers.get('content-type'), length: own.headers.get('content-length'), body: await own.text() })
      .toEqual({ status: 200, type: 'application/json', length: String(BODY.length), body: BODY });
    expect(own.headers.get('request-id')).toMatch(/^req_/);

    const noId = await fetch(`${base}/no-id`);
    expect(noId.headers.get('request-id')).toMatch(/^req_/);
    expect(await noId.text()).toBe(BODY);

    const extra = await fetch(`${base}/set-extra`);
    expect({ extra: extra.headers.get('x-extra'), id: /^req_/.test(extra.headers.get('request-id') ?? ''), body: await extra.text() })
      .toEqual({ extra: 'yes', id: true, body: BODY });

    const status = await fetch(`${base}/set-status`);
    expect({ status: status.status, body: await status.text() }).toEqual({ status: 201, body: BODY });

    const noType = await fetch(`${base}/no-type`);
    expect({ type: noType.headers.get('content-type'), id: /^req_/.test(noType.headers.get('request-id') ?? ''), body: await noType.text() })
      .toEqual({ type: 'application/octet-stream', id: true, body: BODY });

    const fetched = await fetch(`${base}/fetched`);
    expect({ status: fetched.status, upstream: fetched.headers.get('x-upstream'), id: /^req_/.test(fetched.headers.get('request-id') ?? ''), body: await fetched.text() })
      .toEqual({ status: 200, upstream: '1', id: true, body: BODY });
  });
});
