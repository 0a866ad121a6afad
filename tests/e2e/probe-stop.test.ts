/**
 * Stopping the relay services while the health prober has a probe in flight. The stop used to leave the prober
 * running (not awaited): the shutdown went on to close the database, and a probe answered afterwards wrote its
 * channel's status into it. The stop now cuts the probe and resolves once the prober's round has ended.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, nodeOne, send, setPrice } from './relay-setup';

let gw: TestGateway;
let requests = 0;
let inFlight = 0;
let cut = 0;
// Answers the first request with a 500 (the channel is disabled), then never answers: a probe hangs until cut.
const upstream = Bun.serve({
  port: 0,
  idleTimeout: 0,
  fetch(req) {
    if (requests++ === 0) return Response.json({ type: 'error', error: { type: 'api_error', message: 'down' } }, { status: 500 });
    inFlight++;
    return new Promise<Response>((_, reject) => {
      req.signal.addEventListener('abort', () => { inFlight--; cut++; reject(new Error('cut')); });
    });
  },
});

beforeAll(async () => {
  gw = await startGateway({ RELAY_HEALTH_FAILURES: '1', RELAY_HEALTH_CONFIRM: 'false', RELAY_PROBE_INTERVAL_MS: '100', RELAY_PROBE_TIMEOUT_MS: '600000', RELAY_MAX_ATTEMPTS: '1' });
});
afterAll(async () => {
  await gw?.stop();
  upstream.stop(true);
});

describe('the relay stop with a probe in flight', () => {
  test('cuts the probe and waits for the prober: nothing outlives the stop', async () => {
    const id = await addChannel(gw, { type: 'anthropic', url: upstream.url.origin, models: ['probe-stop'] });
    await setPrice(gw, 'probe-stop');
    const u = await keyedUser(gw);
    await send(nodeOne(gw), u.key, msg('probe-stop'));
    const status = () => gw.services.channelRegistry.get(id)!.status;
    for (let i = 0; i < 100 && status() !== 3; i++) await Bun.sleep(20);
    expect(status()).toBe(3);
    for (let i = 0; i < 250 && inFlight === 0; i++) await Bun.sleep(20);
    expect(inFlight).toBe(1);

    const t0 = performance.now();
    await gw.services.relay.close();
    const ms = performance.now() - t0;
    // The probe was cut, not left to answer into a closed database; well within the stop's 5 s limit.
    for (let i = 0; i < 50 && inFlight > 0; i++) await Bun.sleep(20);
    expect({ inFlight, cut }).toEqual({ inFlight: 0, cut: 1 });
    expect(ms).toBeLessThan(2_000);
    // No probe after the stop.
    await Bun.sleep(300);
    expect(requests).toBe(2);
  }, 20_000);
});
