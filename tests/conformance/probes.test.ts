/**
 * Probes clients send before their first request, over real HTTP and without credentials:
 * HEAD / and HEAD /api/hello (Claude Code's pre-connect) → 200, no body; HEAD /v1/messages → 405 with
 * `Allow: POST` and no body (never a 401 that would read as a bad key, never a 5xx). All answer fast.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

async function probe(method: string, path: string) {
  const t = performance.now();
  const res = await fetch(gw.url + path, { method });
  const body = await res.text();
  return { status: res.status, body, allow: res.headers.get('allow'), requestId: res.headers.get('request-id'), ms: performance.now() - t };
}

describe('client probes', () => {
  test('HEAD / and HEAD /api/hello: 200, empty, no credentials needed', async () => {
    for (const path of ['/', '/api/hello']) {
      const r = await probe('HEAD', path);
      expect({ path, status: r.status, body: r.body }).toEqual({ path, status: 200, body: '' });
      expect(r.requestId).toMatch(/^req_/);
    }
    expect((await gw.api('GET', '/api/hello', undefined, null)).body).toEqual({ status: 'ok' });
  });

  test('HEAD /v1/messages and /v1/messages/count_tokens: 405 Allow: POST, empty', async () => {
    for (const path of ['/v1/messages', '/v1/messages/count_tokens']) {
      const r = await probe('HEAD', path);
      expect({ path, status: r.status, body: r.body, allow: r.allow }).toEqual({ path, status: 405, body: '', allow: 'POST' });
    }
  });

  test('a GET route answers HEAD without a body, and its 405 names HEAD in Allow', async () => {
    const r = await probe('HEAD', '/health');
    expect({ status: r.status, body: r.body }).toEqual({ status: 200, body: '' });
    for (const [method, path] of [['POST', '/health'], ['DELETE', '/api/hello'], ['PUT', '/']]) {
      const x = await probe(method, path);
      expect({ path, status: x.status, allow: x.allow?.split(', ').sort() }).toEqual({ path, status: 405, allow: ['GET', 'HEAD'] });
    }
  });

  test('a burst of 100 probes answers quickly', async () => {
    const t = performance.now();
    const rs = await Promise.all(Array.from({ length: 100 }, (_, i) => probe('HEAD', i % 2 ? '/' : '/api/hello')));
    const ms = performance.now() - t;
    console.log(`100 concurrent HEAD probes: ${ms.toFixed(0)} ms`);
    expect(rs.every((r) => r.status === 200)).toBe(true);
    expect(ms).toBeLessThan(2000);
  });
});
