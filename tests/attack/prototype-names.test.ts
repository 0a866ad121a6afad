/**
 * Attack: inherited property names as input. A lookup like `TABLE[name]` finds Object.prototype's
 * members for `constructor`, `toString` or `__proto__`; GET /openapi/assets/constructor answered Bun's
 * HTML 500 page (a stack trace with file paths), anonymously. Every route of the app's own table gets
 * those names in each path parameter, every query string and every JSON body (as root and with a relay
 * key, so the handlers run), and must answer below 500 with JSON. Real gateway, real HTTP.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { ON_PG, startGateway, type TestGateway } from '../helpers/gateway';
import { createApp } from '../../apps/server/src/app';
import { keyedUser, V } from '../e2e/relay-setup';

const NAMES = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf', 'prototype'];
let gw: TestGateway;
let relayKey: string;
let routes: Array<{ method: string; path: string }>;

beforeAll(async () => {
  gw = await startGateway();
  relayKey = (await keyedUser(gw, 1_000_000)).key;
  routes = (createApp(gw.services).routes as Array<{ method: string; path: string }>)
    .filter((r) => ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'].includes(r.method) && r.path !== '/v1/realtime');
});
afterAll(async () => { await gw.stop(); });

async function call(method: string, path: string, body?: string) {
  const headers: Record<string, string> = path.startsWith('/v1/') ? { 'x-api-key': relayKey, ...V } : { authorization: `Bearer ${gw.rootToken}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(gw.url + path, { method, headers, body });
  const text = await res.text();
  return { status: res.status, type: res.headers.get('content-type') ?? '', text };
}

const protoBody = '{"__proto__":{"polluted":true},"constructor":{"prototype":{"polluted":true}},"toString":1,"valueOf":"x"}';

test('inherited property names in path parameters, query strings and bodies never cause a 5xx or a non-JSON answer', async () => {
  const bad: string[] = [];
  let tried = 0;
  for (const r of routes) {
    const paths = r.path.includes(':') ? NAMES.map((n) => r.path.replace(/:[^/]+/g, n)) : [r.path];
    for (const p of paths) {
      const q = `${p}?${NAMES.map((n) => `${n}=${n}`).join('&')}`;
      for (const [url, body] of [[p, undefined], [q, undefined], ...(r.method === 'GET' ? [] : [[p, protoBody]])] as Array<[string, string | undefined]>) {
        const res = await call(r.method, url, body ?? (r.method === 'GET' ? undefined : '{}'));
        tried++;
        const json = res.type.includes('json') || res.type.includes('text/plain; version=0.0.4') || res.type.includes('text/html') && r.path === '/openapi';
        if (res.status >= 500 || (!json && res.status >= 400)) bad.push(`${r.method} ${url} ${body ? 'body' : ''} -> ${res.status} ${res.type} ${res.text.slice(0, 80)}`);
      }
    }
  }
  expect(tried).toBeGreaterThan(100);
  expect(bad).toEqual([]);
  // And nothing was polluted in this process.
  expect(({} as any).polluted).toBeUndefined();
}, 60_000);
