/**
 * Stopping the relay services while a probe is in flight: the leader's prober (auto-disabled channels), or the probe
 * that confirms a channel's failures before it is disabled (started by a request and not waited for). The stop used
 * to leave both running: the shutdown went on to close the database, and a probe answered afterwards wrote its
 * channel's status into it. The stop now cuts them and resolves once they ended.
 */
import { afterEach, describe, expect, test } from 'bun:test';
import { CLUSTER_NODES, startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, nodeOne, send, setPrice } from './relay-setup';

/** Answers the first request with a 500, then never answers: a probe hangs until cut. */
function hangingUpstream() {
  const u = { requests: 0, inFlight: 0, cut: 0, url: '', stop: () => {} };
  const server = Bun.serve({
    port: 0,
    idleTimeout: 0,
    fetch(req) {
      if (u.requests++ === 0) return Response.json({ type: 'error', error: { type: 'api_error', message: 'down' } }, { status: 500 });
      u.inFlight++;
      return new Promise<Response>((_, reject) => {
        req.signal.addEventListener('abort', () => { u.inFlight--; u.cut++; reject(new Error('cut')); });
      });
    },
  });
  u.url = server.url.origin;
  u.stop = () => server.stop(true);
  return u;
}

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0)) await c();
});

async function setUp(confirm: boolean) {
  const up = hangingUpstream();
  const gw: TestGateway = await startGateway({
    RELAY_HEALTH_FAILURES: '1', RELAY_HEALTH_CONFIRM: String(confirm), RELAY_PROBE_INTERVAL_MS: '100', RELAY_PROBE_TIMEOUT_MS: '600000', RELAY_MAX_ATTEMPTS: '1',
  });
  cleanup.push(() => gw.stop(), () => up.stop());
  const model = `probe-stop-${confirm}`;
  const id = await addChannel(gw, { type: 'anthropic', url: up.url, models: [model] });
  await setPrice(gw, model);
  const u = await keyedUser(gw);
  await send(nodeOne(gw), u.key, msg(model));
  return { gw, up, status: () => gw.services.channelRegistry.get(id)!.status };
}

/** Stops the relay services; the probe in flight must be cut by the time it resolves, and none sent after. */
async function stopCuts(gw: TestGateway, up: ReturnType<typeof hangingUpstream>) {
  for (let i = 0; i < 250 && up.inFlight === 0; i++) await Bun.sleep(20);
  expect(up.inFlight).toBe(1);
  const t0 = performance.now();
  await gw.services.relay.close();
  const ms = performance.now() - t0;
  // The abort reaches the upstream over TCP a moment later.
  for (let i = 0; i < 50 && up.inFlight > 0; i++) await Bun.sleep(20);
  expect({ inFlight: up.inFlight, cut: up.cut }).toEqual({ inFlight: 0, cut: 1 });
  // Well within the stop's 5 s limit: cut, not waited out.
  expect(ms).toBeLessThan(2_000);
  await Bun.sleep(300);
  expect(up.requests).toBe(2);
}

describe('the relay stop with a probe in flight', () => {
  // Through several nodes the leader (whose prober runs the probe) may be another process than the one stopped here.
  test.skipIf(CLUSTER_NODES > 1)('the leader\'s prober: its probe is cut and the stop waits for its round', async () => {
    const { gw, up, status } = await setUp(false);
    for (let i = 0; i < 100 && status() !== 3; i++) await Bun.sleep(20);
    expect(status()).toBe(3);
    await stopCuts(gw, up);
  }, 20_000);

  test('a failure\'s confirmation probe: cut, and the channel is not disabled on its account', async () => {
    const { gw, up, status } = await setUp(true);
    await stopCuts(gw, up);
    expect(status()).toBe(1);
  }, 20_000);
});

/** Answers every request with `status` (a 500: the channel's failure; a 401: its key's refusal). */
function failingUpstream(status: number) {
  const u = { hits: 0, url: '', stop: () => {} };
  const server = Bun.serve({
    port: 0,
    fetch: () => {
      u.hits++;
      return Response.json({ type: 'error', error: { type: status === 401 ? 'authentication_error' : 'api_error', message: 'no' } }, { status });
    },
  });
  u.url = server.url.origin;
  u.stop = () => server.stop(true);
  return u;
}

describe('a failure reported after the relay stop, with RELAY_HEALTH_CONFIRM=false', () => {
  // A request still running at shutdown ends after the stop; the database may be closing by then.
  test('the channel is not disabled (no status written)', async () => {
    const up = failingUpstream(500);
    const gw = await startGateway({ RELAY_HEALTH_FAILURES: '1', RELAY_HEALTH_CONFIRM: 'false', RELAY_MAX_ATTEMPTS: '1' });
    cleanup.push(() => gw.stop(), () => up.stop());
    const model = 'after-stop-failure';
    const id = await addChannel(gw, { type: 'anthropic', url: up.url, models: [model] });
    await setPrice(gw, model);
    const u = await keyedUser(gw);
    await gw.services.relay.close();
    const res = await send(nodeOne(gw), u.key, msg(model));
    expect(res.status).toBeGreaterThanOrEqual(500);
    // The request reached the upstream after the stop: its failure was reported, and not written.
    expect(up.hits).toBe(1);
    await Bun.sleep(300);
    expect(gw.services.channelRegistry.get(id)!.status).toBe(1);
  }, 20_000);

  test('a key the upstream refuses is not set aside (no key status written)', async () => {
    const up = failingUpstream(401);
    const gw = await startGateway({ RELAY_HEALTH_FAILURES: '1', RELAY_HEALTH_CONFIRM: 'false', RELAY_MAX_ATTEMPTS: '1' });
    cleanup.push(() => gw.stop(), () => up.stop());
    const model = 'after-stop-refusal';
    await setPrice(gw, model);
    const r = await gw.api('POST', '/api/channel/', {
      name: model, type: 'anthropic', base_url: up.url, key: 'sk-after-stop-1111', keys: ['sk-after-stop-2222'], models: [model], timeout_ms: 5000,
    });
    expect(r.status).toBe(200);
    const u = await keyedUser(gw);
    await gw.services.relay.close();
    expect((await send(nodeOne(gw), u.key, msg(model))).status).toBeGreaterThanOrEqual(400);
    expect(up.hits).toBeGreaterThanOrEqual(1);
    await Bun.sleep(300);
    const keys = (await gw.api('GET', `/api/channel/${r.body.data.id}/keys`)).body.data as Array<{ status: number }>;
    expect(keys.map((k) => k.status)).toEqual([1, 1]);
  }, 20_000);

  // The stop landing right after the health check said "not stopped" and before the key's disable write was issued:
  // the write used to start after close() had resolved (it ran a microtask after the check, in the caller).
  test('a stop landing between the refusal\'s check and its write: the write is issued before the stop and awaited by it', async () => {
    const up = failingUpstream(401);
    const gw = await startGateway({ RELAY_HEALTH_FAILURES: '1', RELAY_HEALTH_CONFIRM: 'false', RELAY_MAX_ATTEMPTS: '1' });
    cleanup.push(() => gw.stop(), () => up.stop());
    const model = 'stop-in-the-gap';
    await setPrice(gw, model);
    const r = await gw.api('POST', '/api/channel/', {
      name: model, type: 'anthropic', base_url: up.url, key: 'sk-gap-1111', keys: ['sk-gap-2222'], models: [model], timeout_ms: 5000,
    });
    expect(r.status).toBe(200);
    const u = await keyedUser(gw);
    const events: string[] = [];
    let closeCalled = false;
    let closeResolved = false;
    let closing: Promise<void> | undefined;
    const { health } = gw.services.relay;
    const keys = gw.services.channelKeys;
    const judge = health.keyRefused.bind(health);
    // The stop runs as the verdict reaches its caller: after the check, before anything the caller does with it.
    health.keyRefused = (...args: Parameters<typeof judge>) => {
      const verdict = judge(...args);
      void verdict.then(() => {
        if (closing) return;
        closeCalled = true;
        closing = gw.services.relay.close().then(() => { closeResolved = true; });
      });
      return verdict;
    };
    const write = keys.autoDisable.bind(keys);
    keys.autoDisable = (...args: Parameters<typeof write>) => {
      events.push(closeCalled ? 'write issued after the stop began' : 'write issued');
      return write(...args).finally(() => events.push(closeResolved ? 'write ended after the stop resolved' : 'write ended'));
    };
    expect((await send(nodeOne(gw), u.key, msg(model))).status).toBeGreaterThanOrEqual(400);
    for (let i = 0; i < 100 && !closing; i++) await Bun.sleep(20);
    await closing;
    await Bun.sleep(300);
    expect(events).toEqual(['write issued', 'write ended']);
    const listed = (await gw.api('GET', `/api/channel/${r.body.data.id}/keys`)).body.data as Array<{ status: number }>;
    // The one key tried (either: the pick is spread) set aside; the stop kept the request from trying the other.
    expect(listed.map((k) => k.status).sort()).toEqual([1, 3]);
  }, 20_000);
});
