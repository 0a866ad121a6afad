/**
 * The server log over real HTTP: an expected failure (a client's 4xx, no healthy channel, an upstream's
 * 500) is exactly one line without a stack; an unknown throw in our own code is a bug and logs its stack.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, send, setPrice, upstream, type Scripted } from './relay-setup';

const STACK_FRAME = /^\s+at /m;
let gw: TestGateway;
let up: Scripted;
let key: string;
beforeAll(async () => {
  gw = await startGateway({ RELAY_MAX_ATTEMPTS: '1', RELAY_HEALTH_FAILURES: '100' });
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['m-up'] });
  await setPrice(gw, 'm-up');
  await setPrice(gw, 'm-none');
  key = (await keyedUser(gw)).key;
});
afterAll(async () => { await gw.stop(); await up.stop(); });

/** The log lines of one request, by the request id the response carried. */
async function linesOf(res: { headers: Headers }) {
  const id = res.headers.get('request-id')!;
  await Bun.sleep(10);
  return gw.logs.filter((l) => l.includes(`id=${id}`));
}

describe('expected failures are one line, no stack', () => {
  test('a 4xx', async () => {
    const r = await gw.api('GET', '/api/channel/999999');
    expect(r.status).toBe(404);
    const lines = await linesOf(r);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^\S+Z info request\.rejected id=\S+ method=GET path=\/api\/channel\/999999 status=404 code=\S+$/);
  });

  test('an upstream 500', async () => {
    up.queue.push({ error: { status: 500, message: 'upstream exploded' } });
    const r = await send(gw, key, { model: 'm-up', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] });
    expect(r.status).toBeGreaterThanOrEqual(500);
    const lines = await linesOf(r);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^\\S+Z warn request\\.failed id=\\S+ method=POST path=/v1/messages status=${r.status} code=\\S+`));
    expect(lines[0]).not.toMatch(STACK_FRAME);
  });

  test('a 503 with no healthy channel', async () => {
    await addChannel(gw, { type: 'anthropic', url: up.url, models: ['m-none'], name: 'off' })
      .then((id) => gw.api('PUT', '/api/channel/', { id, status: 2 }));
    const r = await send(gw, key, { model: 'm-none', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] });
    expect([503, 404]).toContain(r.status);
    const lines = await linesOf(r);
    expect(lines).toHaveLength(1);
    expect(lines[0]).not.toMatch(STACK_FRAME);
  });
});

test('an unknown throw in our code is a bug: one error event followed by its stack', async () => {
  const prices = gw.services.relay.prices;
  const original = prices.list;
  prices.list = () => { throw new Error('deliberate bug for the log test'); };
  try {
    const r = await gw.api('GET', '/api/pricing/');
    expect(r.status).toBe(500);
    expect(r.body.error.code).toBe('internal_error');
    expect(JSON.stringify(r.body)).not.toContain('deliberate');
    const lines = await linesOf(r);
    expect(lines).toHaveLength(1);
    const [event, ...stack] = lines[0]!.split('\n');
    expect(event).toMatch(/^\S+Z error request\.bug id=\S+ method=GET path=\/api\/pricing\/ status=500 code=internal_error$/);
    expect(stack.join('\n')).toContain('deliberate bug for the log test');
    expect(stack.join('\n')).toMatch(STACK_FRAME);
  } finally {
    prices.list = original;
  }
});

test('LOG_FORMAT=json: every line parses, with time, level and event', async () => {
  const j = await startGateway({ LOG_FORMAT: 'json', LOG_REQUESTS: 'true' });
  try {
    const r = await j.api('GET', '/api/channel/999999');
    expect(r.status).toBe(404);
    await Bun.sleep(20);
    const objs = j.logs.map((l) => JSON.parse(l));
    const mine = objs.filter((o) => o.id === r.headers.get('request-id'));
    expect(mine.map((o) => o.event).sort()).toEqual(['http.request', 'request.rejected']);
    for (const o of objs) expect(typeof o.time === 'string' && typeof o.level === 'string' && typeof o.event === 'string').toBe(true);
  } finally {
    await j.stop();
  }
});

test('an error our code caught and wrapped as internal_error is a bug too: its cause\'s stack is logged', async () => {
  const { errors } = await import('@gw/core');
  const prices = gw.services.relay.prices;
  const original = prices.list;
  prices.list = () => { throw errors.internal(new TypeError('wrapped cause for the log test')); };
  try {
    // The fault is in node 1's services: asked of node 1 itself.
    const r = await gw.nodeApi('GET', '/api/pricing/');
    expect(r.status).toBe(500);
    const [line] = await linesOf(r);
    expect(line!.split('\n')[0]).toMatch(/ error request\.bug .* code=internal_error$/);
    expect(line).toContain('TypeError: wrapped cause for the log test');
    expect(line).toMatch(STACK_FRAME);
  } finally {
    prices.list = original;
  }
});
