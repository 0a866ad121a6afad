/**
 * Answers at the edge of the HTTP runtime, over a raw TCP socket. Methods that reach the app get the
 * JSON error object (405 with Allow). What Bun's HTTP parser rejects before any JavaScript runs (neither
 * `fetch` nor Bun.serve's `error` handler is called: tried) is pinned here as it really is, so a Bun
 * upgrade that changes it is noticed: oversized headers, malformed request lines and framing, unknown
 * method tokens.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { rawHttp, rawJson } from '../helpers/raw-http';

let gw: TestGateway;
let host: string;
beforeAll(async () => {
  gw = await startGateway();
  host = new URL(gw.url).host;
});
afterAll(async () => { await gw.stop(); });

const send = (head: string) => rawHttp(gw.url, head, { waitMs: 1500, untilAnswered: true });

test('TRACE, CONNECT, OPTIONS, PATCH and WebDAV methods reach the app: JSON 405 with Allow', async () => {
  for (const [m, path, allow] of [['TRACE', '/health', 'GET'], ['TRACE', '/api/user/login', 'POST'], ['CONNECT', '/v1/messages', 'POST'], ['OPTIONS', '/api/token/', ''], ['PROPFIND', '/health', 'GET']] as const) {
    const x = await send(`${m} ${path} HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
    expect({ m, path, status: x.status }).toEqual({ m, path, status: 405 });
    expect(rawJson(x)?.error?.code).toBe('method_not_allowed');
    if (allow) expect(x.text).toMatch(new RegExp(`\\r\\nallow: [^\\r]*${allow}`, 'i'));
  }
});

test('Bun itself: oversized headers are 431 with an empty body and the connection closed', async () => {
  const x = await rawHttp(gw.url, `GET /health HTTP/1.1\r\nHost: ${host}\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, { waitMs: 1500 });
  expect(x.text).toBe('HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n');
  expect(x.closed).toBe(true);
});

test('Bun itself: malformed request line or framing is 400 with an empty body; an unknown method token is closed unanswered', async () => {
  for (const head of [
    'GARBAGE\r\n\r\n',
    `POST /api/user/login HTTP/1.1\r\nHost: ${host}\r\nContent-Length: abc\r\n\r\n`,
    `POST /api/user/login HTTP/1.1\r\nHost: ${host}\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
  ]) {
    const x = await rawHttp(gw.url, head, { waitMs: 1500 });
    expect({ head: head.slice(0, 40), text: x.text }).toEqual({ head: head.slice(0, 40), text: 'HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n' });
    expect(x.closed).toBe(true);
  }
  const weird = await rawHttp(gw.url, `GET /\x01 HTTP/1.1\r\nHost: ${host}\r\n\r\n`, { waitMs: 1500 });
  expect(weird.text).toBe('HTTP/1.1 505 HTTP Version Not Supported\r\nConnection: close\r\n\r\n');
  const unknown = await rawHttp(gw.url, `FOO /health HTTP/1.1\r\nHost: ${host}\r\n\r\n`, { waitMs: 1500 });
  expect(unknown).toMatchObject({ text: '', closed: true });
});
