/**
 * `bun run bench/stream-first-event.ts`: a stream's first-event latency through one in-process gateway (SQLite), as
 * its client sees it: the response head, the first body bytes and the first `content_block_delta`, for a translated
 * (OpenAI-compatible double) and a native (Anthropic double) channel, with the upstream's frames in one write or
 * BENCH_GAP_MS (default 2) apart. The start of a stream is held until its first event with content (events that show
 * nothing, a role-only delta or `message_start`, are held with it), so the head and first bytes wait for that event;
 * the first content event must not. BENCH_REQUESTS (default 300) sequential requests per case after 30 warm-up ones.
 */
import { startGateway } from '../tests/helpers/gateway';
import { addChannel, keyedUser, setPrice, upstream, V } from '../tests/e2e/relay-setup';
import { quantiles } from './lib/latency';

const N = Number(process.env.BENCH_REQUESTS ?? 300);
const GAP = Number(process.env.BENCH_GAP_MS ?? 2);

const gw = await startGateway({ RELAY_PROBE_INTERVAL_MS: '3600000' });
const ups = [upstream('openai'), upstream('anthropic')];
try {
  for (const [i, kind] of (['openai', 'anthropic'] as const).entries()) {
    await setPrice(gw, `bench-${kind}`);
    await addChannel(gw, { type: kind, url: ups[i]!.url, models: [`bench-${kind}`] });
  }
  const u = await keyedUser(gw, 1_000_000_000);
  const dec = new TextDecoder();
  /** One request's head, first-bytes and first-content times (ms). */
  async function once(model: string) {
    const t0 = performance.now();
    const res = await fetch(`${gw.nodeUrl}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': u.key, ...V },
      body: JSON.stringify({ model, max_tokens: 64, stream: true, messages: [{ role: 'user', content: 'Say hello.' }] }) });
    const head = performance.now() - t0;
    let first = NaN;
    let content = NaN;
    let text = '';
    for await (const c of res.body!) {
      if (Number.isNaN(first)) first = performance.now() - t0;
      if (Number.isNaN(content) && (text += dec.decode(c, { stream: true })).includes('content_block_delta')) content = performance.now() - t0;
    }
    if (res.status !== 200 || Number.isNaN(content)) throw new Error(`status ${res.status}: ${text.slice(0, 200)}`);
    return { head, first, content };
  }
  const fmt = (xs: number[]) => { const q = quantiles(xs); return `p50 ${q.p50.toFixed(2)} p99 ${q.p99.toFixed(2)}`; };
  for (const [i, kind] of (['openai', 'anthropic'] as const).entries()) {
    for (const gap of [0, GAP]) {
      ups[i]!.fallback = { text: 'Hello there, how are you', chunkDelayMs: gap };
      for (let k = 0; k < 30; k++) await once(`bench-${kind}`);
      const s = { head: [] as number[], first: [] as number[], content: [] as number[] };
      for (let k = 0; k < N; k++) {
        const r = await once(`bench-${kind}`);
        s.head.push(r.head); s.first.push(r.first); s.content.push(r.content);
      }
      console.log(`${kind.padEnd(9)} frames ${gap ? `${gap} ms apart` : 'in one write'}: head ${fmt(s.head)} | first bytes ${fmt(s.first)} | first content ${fmt(s.content)} ms`);
    }
  }
} finally {
  for (const x of ups) await x.stop();
  await gw.stop();
}
