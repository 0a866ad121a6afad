import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, eventNames, upstream, type Scripted, keyedUser, msg, nodeOne, send, setPrice } from './relay-setup';

// Two gateways: routing counts upstream hits exactly, so its background prober must not run during the
// test (it would add probe requests); the health gateway probes every 100 ms.
let gw: TestGateway;
let routingGw: TestGateway;
let healthGw: TestGateway;
const ups: Scripted[] = [];
const up = (kind: 'anthropic' | 'openai' = 'anthropic') => { const u = upstream(kind); ups.push(u); return u; };
let key: string;
let routingKey: string;
let healthKey: string;
beforeAll(async () => {
  routingGw = await startGateway({ RELAY_HEALTH_FAILURES: '10', RELAY_PROBE_INTERVAL_MS: '3600000', RELAY_MAX_ATTEMPTS: '3' });
  healthGw = await startGateway({ RELAY_HEALTH_FAILURES: '2', RELAY_PROBE_INTERVAL_MS: '100' });
  routingKey = (await keyedUser(routingGw, 100_000_000)).key;
  healthKey = (await keyedUser(healthGw, 100_000_000)).key;
});
afterAll(async () => { for (const u of ups) await u.stop(); await routingGw.stop(); await healthGw.stop(); });

const status = (id: number) => gw.services.channelRegistry.get(id)!.status;
/** Whether a failure disables a channel is decided as the request fails; the disabling write follows it (a round trip later on PostgreSQL). */
const statusSoon = async (id: number, want: number) => {
  for (let i = 0; i < 100 && status(id) !== want; i++) await Bun.sleep(20);
  return status(id);
};

describe('routing', () => {
  beforeAll(() => { gw = routingGw; key = routingKey; });
  test('highest priority first; weights split traffic inside a priority', async () => {
    const [hi1, hi2, lo] = [up(), up(), up()];
    await setPrice(gw, 'rt');
    await addChannel(gw, { type: 'anthropic', url: hi1.url, models: ['rt'], priority: 10, weight: 3 });
    await addChannel(gw, { type: 'anthropic', url: hi2.url, models: ['rt'], priority: 10, weight: 1 });
    await addChannel(gw, { type: 'anthropic', url: lo.url, models: ['rt'], priority: 1, weight: 100 });
    const N = 200;
    for (let i = 0; i < N; i += 20) await Promise.all(Array.from({ length: 20 }, () => send(gw, key, msg('rt'))));
    expect(lo.hits).toBe(0);
    expect(hi1.hits + hi2.hits).toBe(N);
    // Expected share 0.75; 200 draws: ±4.5 sigma ≈ ±0.14.
    expect(hi1.hits / N).toBeGreaterThan(0.6);
    expect(hi1.hits / N).toBeLessThan(0.9);
  });

  test('429, 5xx and refused connections fail over to the next channel; each channel at most once', async () => {
    const a = up(), b = up(), c = up();
    await setPrice(gw, 'fo');
    await addChannel(gw, { type: 'anthropic', url: a.url, models: ['fo'], priority: 3 });
    await addChannel(gw, { type: 'anthropic', url: b.url, models: ['fo'], priority: 2 });
    await addChannel(gw, { type: 'anthropic', url: c.url, models: ['fo'], priority: 1 });
    a.queue.push({ error: { status: 429 } });
    b.queue.push({ error: { status: 503 } });
    const r = await send(gw, key, msg('fo'));
    expect(r.status).toBe(200);
    expect([a.hits, b.hits, c.hits]).toEqual([1, 1, 1]);
    // All three fail: bounded by RELAY_MAX_ATTEMPTS, no channel twice, a JSON error to the client.
    a.queue.push({ error: { status: 500 } }); b.queue.push({ error: { status: 500 } }); c.queue.push({ error: { status: 500 } });
    const bad = await send(gw, key, msg('fo'));
    expect(bad.status).toBe(502);
    expect(bad.body.error.type).toBe('api_error');
    expect([a.hits, b.hits, c.hits]).toEqual([2, 2, 2]);
    // A 400 from the upstream is the client's problem: not retried.
    a.queue.push({ error: { status: 400 } });
    expect((await send(gw, key, msg('fo'))).status).toBe(400);
    expect([a.hits, b.hits]).toEqual([3, 2]);
    const dead = up();
    await dead.stop();
    await setPrice(gw, 'fo2');
    await addChannel(gw, { type: 'anthropic', url: dead.url, models: ['fo2'], priority: 5 });
    await addChannel(gw, { type: 'anthropic', url: c.url, models: ['fo2'], priority: 1 });
    expect((await send(gw, key, msg('fo2', { stream: true }))).status).toBe(200);
    // A connection reset before any response is retried too.
    const resets = up(), good = up();
    resets.fallback = { reset: true };
    await setPrice(gw, 'fo3');
    await addChannel(gw, { type: 'anthropic', url: resets.url, models: ['fo3'], priority: 2 });
    await addChannel(gw, { type: 'anthropic', url: good.url, models: ['fo3'], priority: 1 });
    expect((await send(gw, key, msg('fo3', { stream: true }))).status).toBe(200);
    expect([resets.hits, good.hits]).toEqual([1, 1]);
  });

  test('a channel slower than its timeout_ms is abandoned for the next one', async () => {
    const slow = up(), fast = up();
    await setPrice(gw, 'to');
    const id = await addChannel(gw, { type: 'anthropic', url: slow.url, models: ['to'], priority: 2 });
    await gw.api('PUT', '/api/channel/', { id, timeout_ms: 1000 });
    await addChannel(gw, { type: 'anthropic', url: fast.url, models: ['to'], priority: 1 });
    // The slow answer comes 2 s after the timeout, so the bound leaves a loaded 3-node run room for the failover
    // (1 s + 450 ms left it 450 ms) and still fails a gateway that waited for the slow channel.
    slow.queue.push({ delayMs: 3000 });
    const t0 = performance.now();
    const r = await send(gw, key, msg('to'));
    expect(r.status).toBe(200);
    expect(performance.now() - t0).toBeLessThan(2500);
    expect([slow.hits, fast.hits]).toEqual([1, 1]);
  });

  test('no retry after the first byte: a cut stream ends with an error event', async () => {
    const a = up(), b = up();
    await setPrice(gw, 'cut');
    await addChannel(gw, { type: 'anthropic', url: a.url, models: ['cut'], priority: 2 });
    await addChannel(gw, { type: 'anthropic', url: b.url, models: ['cut'], priority: 1 });
    a.queue.push({ cutAfter: 4 });
    const r = await send(gw, key, msg('cut', { stream: true }));
    expect(r.status).toBe(200);
    const names = eventNames(r.text);
    expect(names.at(-1)).toBe('error');
    expect(names).not.toContain('message_stop');
    expect(b.hits).toBe(0);
  });
});

describe('stream idle timeout', () => {
  beforeAll(() => { gw = routingGw; key = routingKey; });
  test('an upstream silent mid-stream for timeout_ms ends the stream with an error event', async () => {
    const slow = up();
    await setPrice(gw, 'idle');
    const id = await addChannel(gw, { type: 'anthropic', url: slow.url, models: ['idle'] });
    await gw.api('PUT', '/api/channel/', { id, timeout_ms: 1000 });
    // Silent after its first content event (message_start and content_block_start): before it, nothing is shown and
    // the stream is not committed yet, so a silence there is a timeout that fails over, not a cut stream.
    slow.queue.push({ text: 'a b c', pause: { afterFrames: 2, ms: 2500 } });
    const t0 = performance.now();
    const r = await send(gw, key, msg('idle', { stream: true }));
    expect(r.status).toBe(200);
    expect(eventNames(r.text)[0]).toBe('message_start');
    expect(eventNames(r.text).at(-1)).toBe('error');
    expect(performance.now() - t0).toBeLessThan(2400);
    expect(slow.hits).toBe(1);
  });

  test('an upstream silent for timeout_ms after message_start, before any content: a timeout, answered as JSON, no 200', async () => {
    const slow = up();
    await setPrice(gw, 'idle-start');
    const id = await addChannel(gw, { type: 'anthropic', url: slow.url, models: ['idle-start'] });
    await gw.api('PUT', '/api/channel/', { id, timeout_ms: 1000 });
    slow.queue.push({ text: 'a b c', pause: { afterFrames: 1, ms: 2500 } });
    const r = await send(gw, key, msg('idle-start', { stream: true }));
    expect(r.status).toBe(504);
    expect(JSON.parse(r.text).type).toBe('error');
    expect(slow.hits).toBe(1);
  });
});

describe('health', () => {
  beforeAll(() => { gw = healthGw; key = healthKey; });
  test('consecutive failures auto-disable a channel; the prober re-enables it when it recovers', async () => {
    const flaky = up(), backup = up();
    await setPrice(gw, 'hl');
    const id = await addChannel(gw, { type: 'anthropic', url: flaky.url, models: ['hl'], priority: 2 });
    await addChannel(gw, { type: 'anthropic', url: backup.url, models: ['hl'], priority: 1 });
    flaky.fallback = { error: { status: 500 } };
    // Failure counts are per node: both failures to node 1.
    expect((await send(nodeOne(gw), key, msg('hl'))).status).toBe(200);
    expect(status(id)).toBe(1);
    expect((await send(nodeOne(gw), key, msg('hl'))).status).toBe(200);
    expect(await statusSoon(id, 3)).toBe(3);
    const hits = flaky.hits;
    expect((await send(gw, key, msg('hl'))).status).toBe(200);
    // Disabled: requests skip it (the prober may hit it, requests never do while it fails).
    flaky.fallback = { text: 'Hello there' };
    const t0 = Date.now();
    while (status(id) !== 1 && Date.now() - t0 < 3000) await Bun.sleep(50);
    expect(status(id)).toBe(1);
    expect(flaky.hits).toBeGreaterThan(hits);
  });

  test('an operator\'s disable and re-enable starts the channel\'s failure count again', async () => {
    const flaky = up(), backup = up();
    await setPrice(gw, 'stale');
    const id = await addChannel(gw, { type: 'anthropic', url: flaky.url, models: ['stale'], priority: 2 });
    await addChannel(gw, { type: 'anthropic', url: backup.url, models: ['stale'], priority: 1 });
    flaky.fallback = { error: { status: 500 } };
    // One failure of the two that make it a candidate (counts are per node: all to node 1).
    expect((await send(nodeOne(gw), key, msg('stale'))).status).toBe(200);
    expect(gw.services.relay.health.recentFailures(id)).toBe(1);
    // The operator takes it out, repairs it, puts it back: the failure from before is history.
    expect((await gw.api('PUT', '/api/channel/', { id, status: 2 })).status).toBe(200);
    expect((await gw.api('PUT', '/api/channel/', { id, status: 1 })).status).toBe(200);
    expect(await statusSoon(id, 1)).toBe(1);
    expect(gw.services.relay.health.recentFailures(id)).toBe(0);
    // A single failure after the re-enable is one failure, not the second of a streak.
    expect((await send(nodeOne(gw), key, msg('stale'))).status).toBe(200);
    await Bun.sleep(300);
    expect(status(id)).toBe(1);
  });

  test('a manually disabled channel is never re-enabled by the prober', async () => {
    const u = up();
    await setPrice(gw, 'man');
    const id = await addChannel(gw, { type: 'anthropic', url: u.url, models: ['man'] });
    await gw.api('PUT', '/api/channel/', { id, status: 2 });
    await Bun.sleep(400);
    expect(status(id)).toBe(2);
    expect(u.hits).toBe(0);
  });
});

describe('the prober and an operator at once', () => {
  // The routing gateway: its prober never runs by itself (on whichever node leads), so this node's probe is the only one.
  beforeAll(() => { gw = routingGw; key = routingKey; });
  test('an operator\'s disable made while the prober re-enables the channel stands', async () => {
    const u = up();
    await setPrice(gw, 'race');
    const id = await addChannel(gw, { type: 'anthropic', url: u.url, models: ['race'] });
    await gw.services.channels.setStatus(id, 3, 'auto-disabled for the test');
    expect(await statusSoon(id, 3)).toBe(3);
    // The operator's disable lands between the prober's read of the row (still auto-disabled) and its write:
    // on PostgreSQL a round trip apart, across nodes whatever the change feed takes.
    const repo = (gw.services.channels as any).repo;
    const byId = repo.byId;
    let armed = true;
    repo.byId = async function (cid: number) {
      const row = await byId.call(repo, cid);
      if (armed && cid === id && row?.status === 3) {
        armed = false;
        expect((await gw.api('PUT', '/api/channel/', { id, status: 2 })).status).toBe(200);
      }
      return row;
    };
    try {
      await gw.services.relay.health.probeOnce();
    } finally {
      repo.byId = byId;
    }
    expect(armed).toBe(false);
    expect(u.hits).toBe(1);
    expect((await gw.api('GET', `/api/channel/${id}`)).body.data.status).toBe(2);
    expect(await statusSoon(id, 2)).toBe(2);
  });
});
