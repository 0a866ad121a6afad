/** LOOP_DELAY_SAMPLE_MS: the gateway reports its own event-loop delay on /metrics, per scrape window. */
import { afterEach, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway | null = null;
afterEach(async () => { await gw?.stop(); gw = null; });

// Node 1's own loop, so node 1's /metrics (past the proxy, in a cluster run).
const scrape = async (g: TestGateway) => (await fetch(`${g.nodeUrl}/metrics`, { headers: { authorization: `Bearer ${g.rootToken}` } })).text();
const quantiles = (text: string) => Object.fromEntries(text.split('\n').flatMap((l) => {
  const m = /^gateway_event_loop_delay_seconds\{quantile="([\d.]+)"\} (\S+)$/.exec(l);
  return m ? [[m[1]!, Number(m[2])]] : [];
}));

test('off by default: no series, no timer', async () => {
  gw = await startGateway();
  expect(await scrape(gw)).not.toContain('gateway_event_loop_delay_seconds');
});

test('on: quantiles in seconds since the previous scrape; a 60 ms block shows once, as the maximum', async () => {
  gw = await startGateway({ LOOP_DELAY_SAMPLE_MS: '1' });
  await scrape(gw); // starts a window
  await Bun.sleep(20);
  // The gateway runs in this process: blocking here blocks its loop.
  const t = performance.now();
  while (performance.now() - t < 60) { /* busy */ }
  await Bun.sleep(20);
  const text = await scrape(gw);
  expect(text).toContain('# TYPE gateway_event_loop_delay_seconds gauge');
  const q = quantiles(text);
  expect(Object.keys(q).sort()).toEqual(['0.5', '0.9', '0.99', '0.999', '1']);
  expect(q['1']).toBeGreaterThanOrEqual(0.05);
  expect(q['0.5']).toBeLessThanOrEqual(q['0.99']!);
  expect(q['0.99']).toBeLessThanOrEqual(q['1']!);
  await Bun.sleep(20);
  // The next scrape covers only the quiet time since the previous one.
  expect(quantiles(await scrape(gw))['1']).toBeLessThan(0.05);
});
