/**
 * Prompt-cache billing as Anthropic bills it, over real HTTP with an upstream double that reports the
 * cache-write TTL split: 5-minute and 1-hour writes at their own prices (a bare cache_creation_input_tokens
 * at the 5-minute price), the long-context tier applied to the whole request above its threshold, the split
 * kept on the usage row and passed through in the client's usage, and a split claiming more 1-hour writes
 * than writes cut to the writes.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, send, upstream, type Scripted } from './relay-setup';
import { readSse } from '../doubles/sse';

let gw: TestGateway;
let ant: Scripted;
let user: Awaited<ReturnType<typeof keyedUser>>;

const BASE = { input: 3_000_000, output: 15_000_000, cache_read: 300_000, cache_write: 3_750_000, cache_write_1h: 6_000_000 };
const LONG = { input: 6_000_000, output: 22_500_000, cache_read: 600_000, cache_write: 7_500_000, cache_write_1h: 12_000_000 };
const THRESHOLD = 200_000;

beforeAll(async () => {
  gw = await startGateway();
  ant = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['claude-t'] });
  const r = await gw.api('PUT', '/api/pricing/', { model: 'claude-t', ...BASE, context_window: 1_000_000, long_context_threshold: THRESHOLD, long_context: LONG });
  expect(r.status).toBe(200);
  user = await keyedUser(gw, 1_000_000_000_000);
});
afterAll(async () => { await ant.stop(); await gw.stop(); });

const logOf = async (id: string) => {
  const r = await gw.api('GET', `/api/log/?request_id=${id}`);
  const row = r.body.data.items.find((x: any) => x.request_id === id);
  expect(row).toBeDefined();
  return row;
};

/** Independent of the gateway's code: Σ tokens × price, rounded up once. */
const expected = (parts: Array<[number, number]>) => {
  const micro = parts.reduce((s, [n, p]) => s + BigInt(n) * BigInt(p), 0n);
  return Number((micro + 999_999n) / 1_000_000n);
};

type U = { input: number; output: number; cacheRead?: number; cacheWrite?: number; cacheWrite1h?: number };
async function call(stream: boolean, usage: U) {
  ant.queue.push({ text: 'ok', usage });
  const r = await send(gw, user.key, { model: 'claude-t', max_tokens: 100, stream, messages: [{ role: 'user', content: 'Hi' }] });
  expect(r.status).toBe(200);
  // SSE: the final counts are in message_delta (this double sends the whole usage there too).
  const clientUsage = stream
    ? JSON.parse((await readSse(new Response(r.text))).find((e) => e.event === 'message_delta')!.data).usage
    : r.body.usage;
  return { row: await logOf(r.headers.get('request-id')!), clientUsage };
}

for (const stream of [false, true]) {
  describe(stream ? 'SSE' : 'JSON', () => {
    test('a bare cache_creation_input_tokens is billed at the 5-minute price', async () => {
      const { row } = await call(stream, { input: 100, output: 10, cacheWrite: 1_000 });
      expect(row).toMatchObject({ cache_write_tokens: 1_000, cache_write_5m_tokens: 1_000, cache_write_1h_tokens: 0, long_context: false, usage_flag: '' });
      expect(row.cost).toBe(expected([[100, BASE.input], [10, BASE.output], [1_000, BASE.cache_write]]));
    });

    test('the 5m/1h split is billed at the two prices, kept on the row and passed to the client', async () => {
      const { row, clientUsage } = await call(stream, { input: 100, output: 10, cacheRead: 50, cacheWrite: 1_000, cacheWrite1h: 600 });
      expect(row).toMatchObject({ cache_read_tokens: 50, cache_write_tokens: 1_000, cache_write_5m_tokens: 400, cache_write_1h_tokens: 600, long_context: false });
      expect(row.cost).toBe(expected([[100, BASE.input], [10, BASE.output], [50, BASE.cache_read], [400, BASE.cache_write], [600, BASE.cache_write_1h]]));
      expect(clientUsage.cache_creation).toEqual({ ephemeral_5m_input_tokens: 400, ephemeral_1h_input_tokens: 600 });
    });

    test('input at the threshold stays in the base tier', async () => {
      const { row } = await call(stream, { input: THRESHOLD - 1_000, output: 10, cacheRead: 1_000 });
      expect(row.long_context).toBe(false);
      expect(row.cost).toBe(expected([[THRESHOLD - 1_000, BASE.input], [10, BASE.output], [1_000, BASE.cache_read]]));
    });

    test('input above the threshold (cache reads and writes included) bills every kind at the long-context prices', async () => {
      const { row } = await call(stream, { input: 150_000, output: 80, cacheRead: 40_000, cacheWrite: 10_001, cacheWrite1h: 5_000 });
      expect(row).toMatchObject({ long_context: true, cache_write_5m_tokens: 5_001, cache_write_1h_tokens: 5_000 });
      expect(row.cost).toBe(expected([[150_000, LONG.input], [80, LONG.output], [40_000, LONG.cache_read], [5_001, LONG.cache_write], [5_000, LONG.cache_write_1h]]));
    });
  });
}

test('an upstream claiming more 1-hour writes than writes is cut to the writes and flagged', async () => {
  ant.queue.push({
    response: () => Response.json({
      id: 'msg_x', type: 'message', role: 'assistant', model: 'm', content: [{ type: 'text', text: 'ok' }], stop_reason: 'end_turn', stop_sequence: null,
      usage: { input_tokens: 10, output_tokens: 5, cache_read_input_tokens: 0, cache_creation_input_tokens: 100, cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 900_000 } },
    }),
  });
  const r = await send(gw, user.key, { model: 'claude-t', max_tokens: 100, messages: [{ role: 'user', content: 'Hi' }] });
  expect(r.status).toBe(200);
  const row = await logOf(r.headers.get('request-id')!);
  expect(row).toMatchObject({ cache_write_tokens: 100, cache_write_1h_tokens: 100, cache_write_5m_tokens: 0, usage_flag: 'implausible' });
  expect(row.cost).toBe(expected([[10, BASE.input], [5, BASE.output], [100, BASE.cache_write_1h]]));
});

test('without cache_write_1h, 1-hour writes are billed at 8/5 of cache_write (2× input), not the 5-minute price; a half-set long-context tier is refused', async () => {
  expect((await gw.api('PUT', '/api/pricing/', { model: 'claude-u', input: 1_000_000, output: 1_000_000, cache_write: 2_000_000 })).body.data.cache_write_1h).toBeNull();
  const half = await gw.api('PUT', '/api/pricing/', { model: 'claude-u', input: 1, output: 1, long_context_threshold: 1000 });
  expect(half.status).toBe(400);
  expect(half.body.error.param).toBe('long_context');
  const other = await gw.api('PUT', '/api/pricing/', { model: 'claude-u', input: 1, output: 1, long_context: LONG });
  expect(other.status).toBe(400);
  expect(other.body.error.param).toBe('long_context_threshold');
  const bad = await gw.api('PUT', '/api/pricing/', { model: 'claude-u', input: 1, output: 1, long_context_threshold: 10, long_context: { ...LONG, input: 1.5 } });
  expect(bad.status).toBe(400);
  expect(bad.body.error.param).toStartWith('long_context');
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['claude-u'] });
  ant.queue.push({ text: 'ok', usage: { input: 0, output: 0, cacheWrite: 3, cacheWrite1h: 3 } });
  const r = await send(gw, user.key, { model: 'claude-u', max_tokens: 100, messages: [{ role: 'user', content: 'Hi' }] });
  expect((await logOf(r.headers.get('request-id')!)).cost).toBe(expected([[3, 3_200_000]]));
  const view = (await gw.api('GET', '/api/pricing/claude-t')).body.data;
  expect(view).toMatchObject({ ...BASE, long_context_threshold: THRESHOLD, long_context: LONG });
});

test("a client's 1-hour cache_control at the quick start's prices (no cache_write_1h) bills Anthropic's 2× input", async () => {
  // README's quick start: Sonnet at $3/$15 in these units, 5-minute writes 1.25× input, no 1-hour price.
  const QUICK = { input: 1_500_000, output: 7_500_000, cache_read: 150_000, cache_write: 1_875_000 };
  expect((await gw.api('PUT', '/api/pricing/', { model: 'claude-q', ...QUICK })).status).toBe(200);
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['claude-q'] });
  const system = [{ type: 'text', text: 'A long, stable prompt', cache_control: { type: 'ephemeral', ttl: '1h' } }];
  for (const stream of [false, true]) {
    // What Anthropic answers such a request the first time: the prompt written to the cache with the 1-hour TTL.
    ant.queue.push({ text: 'ok', usage: { input: 5, output: 10, cacheWrite: 100_000, cacheWrite1h: 100_000 } });
    const r = await send(gw, user.key, { model: 'claude-q', max_tokens: 100, stream, system, messages: [{ role: 'user', content: 'Hi' }] });
    expect(r.status).toBe(200);
    expect(ant.last().body.system[0].cache_control).toEqual({ type: 'ephemeral', ttl: '1h' });
    const row = await logOf(r.headers.get('request-id')!);
    expect(row).toMatchObject({ cache_write_1h_tokens: 100_000, cache_write_5m_tokens: 0 });
    // 100,000 × 3,000,000 / 1e6 = 300,000 (Anthropic's $0.30 at 2× input); at the 5-minute price it was 187,500.
    expect(row.cost).toBe(expected([[5, QUICK.input], [10, QUICK.output], [100_000, 3_000_000]]));
  }
  // A long-context tier set without its own 1-hour price gets the same 8/5 of its cache_write.
  const lc = { input: 3_000_000, output: 11_250_000, cache_read: 300_000, cache_write: 3_750_000 };
  const put = await gw.api('PUT', '/api/pricing/', { model: 'claude-q', ...QUICK, long_context_threshold: 200_000, long_context: lc });
  expect(put.body.data.long_context).toEqual({ ...lc, cache_write_1h: 6_000_000 });
  expect(put.body.data.cache_write_1h).toBeNull();
});

test('a model priced without cache_write bills cache writes at the input price, never 0 (a client marking every prompt cache_control paid no input)', async () => {
  // The CLI's own example: input, output and cache reads, no cache-write price.
  const PLAIN = { input: 800_000, output: 4_000_000, cache_read: 80_000 };
  expect((await gw.api('PUT', '/api/pricing/', { model: 'claude-plain', ...PLAIN })).status).toBe(200);
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['claude-plain'] });
  const system = [{ type: 'text', text: 'A prompt made new each time, so it is always written', cache_control: { type: 'ephemeral' } }];
  for (const [stream, usage] of [
    [false, { input: 3, output: 10, cacheWrite: 100_000 }],
    [true, { input: 3, output: 10, cacheWrite: 100_000, cacheWrite1h: 40_000 }],
  ] as const) {
    // Anthropic reports the written prompt outside input_tokens: before, 100,000 tokens written were billed 0.
    ant.queue.push({ text: 'ok', usage });
    const r = await send(gw, user.key, { model: 'claude-plain', max_tokens: 100, stream, system, messages: [{ role: 'user', content: 'Hi' }] });
    expect(r.status).toBe(200);
    const row = await logOf(r.headers.get('request-id')!);
    expect(row.cache_write_tokens).toBe(100_000);
    expect(row.cost).toBe(expected([[3, PLAIN.input], [10, PLAIN.output], [100_000, PLAIN.input]]));
  }
  // The stored price stays as the operator set it: the rule is billing's.
  expect((await gw.api('GET', '/api/pricing/claude-plain')).body.data).toMatchObject({ cache_write: 0, cache_write_1h: null });
});
