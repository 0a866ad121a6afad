/**
 * Per-channel auto-disable rules, first-byte timeout and probe interval, over real HTTP with upstream
 * doubles. The global threshold is high here, so only a channel's own rules can disable it.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { keyedUser, msg, nodeOne, send, setPrice, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
const ups: Scripted[] = [];
const up = () => { const u = upstream('anthropic'); ups.push(u); return u; };
beforeAll(async () => {
  // Failure counts are per node (README: Running a cluster): every request goes to node 1.
  gw = nodeOne(await startGateway({ RELAY_HEALTH_FAILURES: '10', RELAY_PROBE_INTERVAL_MS: '3600000', RELAY_MAX_ATTEMPTS: '3', RELAY_HEALTH_CONFIRM: 'false' }));
});
afterAll(async () => { for (const u of ups) await u.stop(); await gw.stop(); });

const status = (id: number) => gw.services.channelRegistry.get(id)!.status;
/**
 * Whether a failure disables the channel is decided while the request fails (so a channel that must stay
 * enabled is seen so at once); the disabling write follows it, a round trip later on PostgreSQL: wait for it.
 */
const statusSoon = async (id: number, want: number) => {
  for (let i = 0; i < 100 && status(id) !== want; i++) await Bun.sleep(20);
  return status(id);
};

/** A channel under test (priority 2) with `extra` settings, and a healthy fallback (priority 1). */
async function pair(model: string, extra: Record<string, unknown>) {
  await setPrice(gw, model);
  const a = up();
  const b = up();
  const mk = async (u: Scripted, priority: number, more: Record<string, unknown>) => {
    const r = await gw.api('POST', '/api/channel/', { name: `${model}-${priority}`, type: 'anthropic', base_url: u.url, key: 'sk-rules-key-123', models: [model], priority, timeout_ms: 5000, ...more });
    if (r.status !== 200) throw new Error(JSON.stringify(r.body));
    return r.body.data.id as number;
  };
  return { a, b, id: await mk(a, 2, extra), fallback: await mk(b, 1, {}) };
}

describe('failure rules', () => {
  test('2 failures within 5 requests disable the channel even with successes between them', async () => {
    const { a, id } = await pair('fr-window', { failure_rules: { failures: 2, window_requests: 5 } });
    const u = await keyedUser(gw);
    a.queue.push({ error: { status: 500 } }, {}, {}, { error: { status: 500 } });
    for (let i = 0; i < 3; i++) expect((await send(gw, u.key, msg('fr-window'))).status).toBe(200);
    expect(status(id)).toBe(1);
    expect((await send(gw, u.key, msg('fr-window'))).status).toBe(200); // failed over to the fallback
    expect(await statusSoon(id, 3)).toBe(3);
    expect((await gw.api('GET', `/api/channel/${id}`)).body.data.status_reason).toContain('2 failures within 5 requests');
  });

  test('failures further apart than the window do not disable', async () => {
    const { a, id } = await pair('fr-apart', { failure_rules: { failures: 2, window_requests: 5 } });
    const u = await keyedUser(gw);
    a.queue.push({ error: { status: 500 } }, {}, {}, {}, {}, { error: { status: 500 } });
    for (let i = 0; i < 6; i++) expect((await send(gw, u.key, msg('fr-apart'))).status).toBe(200);
    expect(status(id)).toBe(1);
  });

  test('window_seconds: failures older than the window do not count', async () => {
    const { a, id } = await pair('fr-seconds', { failure_rules: { failures: 2, window_requests: 10, window_seconds: 1 } });
    const u = await keyedUser(gw);
    a.queue.push({ error: { status: 500 } });
    await send(gw, u.key, msg('fr-seconds'));
    await Bun.sleep(1100);
    a.queue.push({ error: { status: 500 } });
    await send(gw, u.key, msg('fr-seconds'));
    expect(status(id)).toBe(1);
    a.queue.push({ error: { status: 500 } });
    await send(gw, u.key, msg('fr-seconds'));
    expect(await statusSoon(id, 3)).toBe(3);
  });

  test('statuses: only the listed statuses count; keywords make any upstream error count', async () => {
    const { a, id } = await pair('fr-status', { failure_rules: { statuses: '500-599', failures: 1 } });
    const u = await keyedUser(gw);
    a.queue.push({ error: { status: 404 } }, { error: { status: 408 } });
    await send(gw, u.key, msg('fr-status'));
    await send(gw, u.key, msg('fr-status'));
    expect(status(id)).toBe(1);
    a.queue.push({ error: { status: 502 } });
    await send(gw, u.key, msg('fr-status'));
    expect(await statusSoon(id, 3)).toBe(3);

    const k = await pair('fr-keyword', { failure_rules: { keywords: ['Organization Suspended'], failures: 1 } });
    k.a.queue.push({ error: { status: 400, message: 'this organization suspended for abuse' } });
    expect((await send(gw, u.key, msg('fr-keyword'))).status).toBe(400);
    expect(await statusSoon(k.id, 3)).toBe(3);
  });
});

describe('first-byte timeout', () => {
  for (const stream of [false, true]) {
    test(`an upstream silent past first_byte_timeout_ms fails over long before timeout_ms (stream: ${stream})`, async () => {
      const model = `fb-${stream}`;
      const { a, b, id } = await pair(model, { first_byte_timeout_ms: 300 });
      const u = await keyedUser(gw);
      a.queue.push({ delayMs: 3000 });
      const t0 = performance.now();
      const r = await send(gw, u.key, msg(model, { stream }));
      const ms = performance.now() - t0;
      expect(r.status).toBe(200);
      expect(ms).toBeLessThan(2000);
      expect(b.hits).toBe(1);
      expect(gw.services.relay.health.recentFailures(id)).toBe(1);
    });
  }

  // Off by default (README: a default cannot tell a hung upstream from a slow first byte): a silent upstream is left
  // only at the channel's timeout_ms, whose own default is 300 s. Here timeout_ms is 1.5 s.
  test('by default there is none: an upstream that never answers is left at timeout_ms, not before', async () => {
    const { a, b, id } = await pair('fb-default', { timeout_ms: 1500 });
    expect((await gw.api('GET', `/api/channel/${id}`)).body.data.first_byte_timeout_ms).toBeNull();
    const u = await keyedUser(gw);
    // Headers never come (well past timeout_ms), then, for a stream, headers at once and a first chunk that never comes.
    a.queue.push({ delayMs: 60_000 }, { response: () => new Response(new ReadableStream({ start() {} }), { headers: { 'content-type': 'text/event-stream' } }) });
    for (const stream of [false, true]) {
      const t0 = performance.now();
      const r = await send(gw, u.key, msg('fb-default', { stream }));
      const ms = performance.now() - t0;
      expect(r.status).toBe(200);
      expect(ms).toBeGreaterThanOrEqual(1400);
      expect(ms).toBeLessThan(4000);
    }
    expect(b.hits).toBe(2);
  }, 20_000);

  test('a fast upstream is not affected by the first-byte timeout', async () => {
    const { b, id } = await pair('fb-fast', { first_byte_timeout_ms: 300 });
    const u = await keyedUser(gw);
    for (let i = 0; i < 3; i++) expect((await send(gw, u.key, msg('fb-fast', { stream: i === 1 }))).status).toBe(200);
    expect(b.hits).toBe(0);
    expect(status(id)).toBe(1);
  });
});

describe('probe schedule', () => {
  test('a channel with probe_interval_ms is probed on its own schedule; others wait for the global interval', async () => {
    const fast = await pair('pr-fast', { probe_interval_ms: 1000, failure_rules: { failures: 1 } });
    const slow = await pair('pr-slow', { failure_rules: { failures: 1 } });
    const u = await keyedUser(gw);
    fast.a.queue.push({ error: { status: 500 } });
    slow.a.queue.push({ error: { status: 500 } });
    await send(gw, u.key, msg('pr-fast'));
    await send(gw, u.key, msg('pr-slow'));
    expect([await statusSoon(fast.id, 3), await statusSoon(slow.id, 3)]).toEqual([3, 3]);
    const deadline = Date.now() + 5000;
    while (status(fast.id) !== 1 && Date.now() < deadline) await Bun.sleep(100);
    expect(status(fast.id)).toBe(1);
    expect(status(slow.id)).toBe(3);
  });
});
