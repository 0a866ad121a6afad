/**
 * count_tokens under a start-up burst, over real HTTP: 50 concurrent requests on an anthropic channel
 * and on a translated channel. Identical bodies reach the upstream once (recent counts are reused and
 * concurrent identical ones share one call); distinct bodies never have more than the per-channel cap
 * in flight upstream (the rest get the local estimate). A translated channel never calls upstream.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { V, addChannel, keyedUser, nodeOne, setPrice, upstream, type Scripted } from './relay-setup';
import { jsonResponse } from '../doubles/sse';

let gw: TestGateway;
let ant: Scripted;
let oai: Scripted;
let key: string;
let inflight = 0;
let peak = 0;
beforeAll(async () => {
  // The count cache and its in-flight cap are per process: every request goes to node 1.
  gw = nodeOne(await startGateway());
  ant = upstream('anthropic');
  oai = upstream('openai');
  // A slow counting upstream (100 ms), tracking how many counts it serves at once.
  ant.double.script((req) => (req.path.endsWith('/count_tokens') ? {
    response: async () => {
      peak = Math.max(peak, ++inflight);
      await Bun.sleep(100);
      inflight--;
      return jsonResponse({ input_tokens: 1000 + JSON.stringify(req.body).length });
    },
  } : undefined));
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['claude-ct'] });
  await addChannel(gw, { type: 'openai', url: oai.url, models: ['gpt-ct'] });
  await setPrice(gw, 'claude-ct');
  await setPrice(gw, 'gpt-ct');
  key = (await keyedUser(gw)).key;
});
afterAll(async () => { await ant.stop(); await oai.stop(); await gw.stop(); });

const body = (model: string, text: string) => ({ model, messages: [{ role: 'user', content: text }], tools: [{ name: 'Bash', input_schema: { type: 'object' } }] });
const count = (b: unknown, as = key) => fetch(`${gw.url}/v1/messages/count_tokens`, { method: 'POST', headers: { ...V, 'content-type': 'application/json', 'x-api-key': as }, body: JSON.stringify(b) });

async function burst(bodies: unknown[]): Promise<{ ms: number; statuses: number[]; counts: number[] }> {
  const t = performance.now();
  const res = await Promise.all(bodies.map((b) => count(b)));
  const counts = await Promise.all(res.map(async (r) => ((await r.json()) as { input_tokens: number }).input_tokens));
  return { ms: Math.round(performance.now() - t), statuses: res.map((r) => r.status), counts };
}

describe('count_tokens bursts', () => {
  test('anthropic channel, 50 identical: one upstream call, every answer the upstream count', async () => {
    const before = ant.hits;
    const r = await burst(Array.from({ length: 50 }, () => body('claude-ct', 'same prompt')));
    console.log(`anthropic 50 identical: ${r.ms} ms, upstream calls ${ant.hits - before}`);
    expect(r.statuses.every((s) => s === 200)).toBe(true);
    expect(new Set(r.counts).size).toBe(1);
    expect(r.counts[0]).toBeGreaterThan(1000);
    expect(ant.hits - before).toBe(1);
    // A repeat within the cache's lifetime is answered locally.
    expect((await burst([body('claude-ct', 'same prompt')])).counts[0]).toBe(r.counts[0]!);
    expect(ant.hits - before).toBe(1);
  });

  test('anthropic channel, 50 distinct: at most the cap in flight upstream, all 200', async () => {
    const before = ant.hits;
    peak = 0;
    const r = await burst(Array.from({ length: 50 }, (_, i) => body('claude-ct', `prompt number ${i}`)));
    console.log(`anthropic 50 distinct: ${r.ms} ms, upstream calls ${ant.hits - before}, peak in flight ${peak}`);
    expect(r.statuses.every((s) => s === 200)).toBe(true);
    expect(peak).toBeLessThanOrEqual(8);
    expect(r.counts.every((n) => n > 0)).toBe(true);
  });

  test('translated channel, 50 distinct: local estimates, no upstream call', async () => {
    const before = oai.hits;
    const r = await burst(Array.from({ length: 50 }, (_, i) => body('gpt-ct', `prompt number ${i}`)));
    console.log(`openai 50 distinct: ${r.ms} ms`);
    expect(r.statuses.every((s) => s === 200)).toBe(true);
    expect(oai.hits).toBe(before);
  });

  test("one user's counts are not reused for another: a fast answer would confirm a guess of someone else's prompt", async () => {
    const other = (await keyedUser(gw)).key;
    const secret = body('claude-ct', 'the merger closes on 2026-12-01');
    const before = ant.hits;
    expect((await count(secret)).status).toBe(200);
    expect(ant.hits - before).toBe(1);
    // Another user's identical body within the cache's lifetime is counted upstream again, not answered from the first's entry...
    expect((await count(secret, other)).status).toBe(200);
    expect(ant.hits - before).toBe(2);
    // ...nor does it share the first user's call in flight.
    const again = body('claude-ct', 'guess while it is being counted');
    await Promise.all([count(again), count(again, other)]);
    expect(ant.hits - before).toBe(4);
    // Each user's own repeat is still answered from the cache.
    await Promise.all([count(secret), count(secret, other)]);
    expect(ant.hits - before).toBe(4);
  });
});
