/**
 * Attack (PostgreSQL mode): the node's Redis connection goes silent (its packets dropped, nothing closed: a
 * lost NAT entry, a failover). Before, every admission waited on it for as long as TCP kept it (every request
 * of the node hung, here past 25 s each). Now the connection is replaced after REDIS_SILENCE_MS: the
 * requests caught in it are answered within about that time (their commands retried on the new connection,
 * or 503), and the next ones are served.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { ON_PG, startGateway, type TestGateway } from '../helpers/gateway';
import { REDIS_TEST_URL } from '../helpers/redis';
import { tcpProxy, type TcpProxy } from '../helpers/tcp-proxy';
import { addChannel, keyedUser, msg, setPrice, upstream, V, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let proxy: TcpProxy;
let up: Scripted;

describe.skipIf(!ON_PG)('a node whose Redis connection goes silent', () => {
  beforeAll(async () => {
    const redis = new URL(REDIS_TEST_URL);
    proxy = tcpProxy({ host: redis.hostname, port: Number(redis.port || 6379) });
    gw = await startGateway({ REDIS_URL: `redis://127.0.0.1:${proxy.port}`, REDIS_SILENCE_MS: '1000' });
    up = upstream('anthropic');
    await addChannel(gw, { type: 'anthropic', url: up.url, models: ['quiet'] });
    await setPrice(gw, 'quiet', { input: 1_000_000, output: 1_000_000 });
  });
  afterAll(async () => {
    await up?.stop();
    await gw?.stop();
    proxy?.stop();
  });

  test('requests caught in the silence are answered (served or 503) within about the limit, and the node serves again', async () => {
    const u = await keyedUser(gw, 10_000_000);
    const headers = { 'content-type': 'application/json', 'x-api-key': u.key, ...V };
    const send = async () => {
      const t0 = performance.now();
      const res = await fetch(`${gw.url}/v1/messages`, { method: 'POST', headers, body: JSON.stringify(msg('quiet')), signal: AbortSignal.timeout(15_000) });
      await res.text();
      return { status: res.status, ms: performance.now() - t0 };
    };
    expect((await send()).status).toBe(200);
    proxy.blackhole();
    const caught = await Promise.all(Array.from({ length: 3 }, send));
    console.log(`caught in the silence: ${caught.map((r) => `${r.status} in ${r.ms.toFixed(0)} ms`).join(', ')}`);
    for (const r of caught) {
      expect([200, 503]).toContain(r.status);
      expect(r.ms).toBeLessThan(5_000);
    }
    const t0 = performance.now();
    let served = 0;
    while (performance.now() - t0 < 10_000 && served < 3) {
      const r = await send();
      if (r.status === 200) served++;
      else await Bun.sleep(200);
    }
    console.log(`served again ${(performance.now() - t0).toFixed(0)} ms after the caught requests`);
    expect(served).toBe(3);
  }, 40_000);
});
