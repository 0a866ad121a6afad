/**
 * Attack from the upstream side: a 200 JSON answer with `content-encoding: gzip` whose ~1 MB body decodes
 * to 1 GiB. Bun's fetch decodes it, and its Content-Length counts the compressed bytes, which fit under the 32 MiB
 * answer limit: the relay read it natively in one piece (`arrayBuffer()`), buffering the decoded bytes until the
 * channel timeout (measured: +500 MiB in 5 s). Now the limit applies to the decoded bytes: 502
 * upstream_bad_response once past 32 MiB, the upstream cancelled, memory bounded. Native and OpenAI-type channels.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { gzipSync } from 'node:zlib';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let a: Scripted;
let o: Scripted;
let key: string;

const MiB = 1 << 20;
/** `prefix` then `size` bytes of 'a', gzipped in 16 MiB members (a concatenation of members is one valid gzip body). */
function bomb(prefix: string, size: number): Uint8Array {
  const step = Buffer.alloc(16 * MiB, 0x61);
  const parts = [gzipSync(Buffer.from(prefix))];
  for (let n = 0; n < size; n += step.length) parts.push(gzipSync(step, { level: 9 }));
  return new Uint8Array(Buffer.concat(parts));
}

beforeAll(async () => {
  gw = await startGateway({ RELAY_HEALTH_FAILURES: '1000' });
  a = upstream('anthropic');
  o = upstream('openai');
  // A long timeout: the bomb must be stopped by the size limit, not by the channel's timeout.
  for (const [s, type, model] of [[a, 'anthropic', 'claude-x'], [o, 'openai', 'gpt-x']] as const) {
    const r = await gw.api('POST', '/api/channel/', { name: `ch-${type}`, type, base_url: s.url, key: 'upstream-key', models: [model], timeout_ms: 60_000 });
    if (r.status !== 200) throw new Error(JSON.stringify(r.body));
    await setPrice(gw, model);
  }
  key = (await keyedUser(gw, 100_000_000)).key;
});
afterAll(async () => {
  await a.stop();
  await o.stop();
  await gw.stop();
});

const NATIVE = '{"id":"msg_x","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"';
const OPENAI = '{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"';

for (const [name, kind, model, prefix, enc, size] of [
  ['native, gzip', 'a', 'claude-x', NATIVE, 'gzip', 512 * MiB],
  ['OpenAI-type, gzip', 'o', 'gpt-x', OPENAI, 'gzip', 512 * MiB],
] as const) {
  test(`${name}: a small body decoding to ${size / MiB} MiB is cut at the 32 MiB limit: 502 upstream_bad_response, memory bounded`, async () => {
    const body = bomb(prefix, size);
    expect(body.byteLength).toBeLessThan(32 * MiB); // its Content-Length fits the limit: only the decoded size does not
    const s = kind === 'a' ? a : o;
    s.queue.push({ response: () => new Response(body, { headers: { 'content-type': 'application/json', 'content-encoding': enc } }) });
    Bun.gc(true);
    const base = process.memoryUsage().rss;
    let peak = base;
    const sample = setInterval(() => { peak = Math.max(peak, process.memoryUsage().rss); }, 5);
    const t0 = performance.now();
    const r = await send(gw, key, msg(model)).finally(() => clearInterval(sample));
    const ms = performance.now() - t0;
    console.log(`${name} bomb (${(body.byteLength / 1024).toFixed(0)} KiB → ${size / MiB} MiB): ${r.status} in ${ms.toFixed(0)} ms, peak RSS +${((peak - base) / MiB).toFixed(0)} MiB`);
    expect(r.status).toBe(502);
    expect(r.body.error.code).toBe('upstream_bad_response');
    // Before: the decoded answer was buffered whole (hundreds of MiB). Now: the 32 MiB read plus one decoded chunk.
    expect(peak - base).toBeLessThan(200 * MiB);
  }, 60_000);
}

test('a compressed answer of sane size still passes', async () => {
  const text = 'hello '.repeat(100_000);
  const body = gzipSync(JSON.stringify({ id: 'msg_y', type: 'message', role: 'assistant', model: 'm', content: [{ type: 'text', text }], stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 5, output_tokens: 7 } }));
  a.queue.push({ response: () => new Response(body, { headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' } }) });
  const r = await send(gw, key, msg('claude-x'));
  expect(r.status).toBe(200);
  expect(r.body.content[0].text).toBe(text);
  expect(r.body.usage.output_tokens).toBe(7);
});
