/**
 * A stream's start is read until its first event (pings and comments aside) shows whether it begins with an error,
 * over real HTTP through a gateway: an upstream that sends keep-alive comments first (OpenRouter while its provider
 * answers) or splits its error event across chunks is still judged before anything is committed, and one that only
 * thinks in silence after a comment is committed at the bound and answers in full.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, nodeOne, send, setPrice, upstream, V, type Scripted } from './relay-setup';

let gw: TestGateway;
const ups: Scripted[] = [];
beforeAll(async () => {
  gw = await startGateway({ RELAY_PROBE_INTERVAL_MS: '3600000', RELAY_MAX_ATTEMPTS: '3' });
}, 30_000);
afterAll(async () => { for (const u of ups) await u.stop(); await gw.stop(); });

/** Two channels for `model` of `kind`, priorities 2 and 1. */
async function pair(model: string, kind: 'anthropic' | 'openai') {
  await setPrice(gw, model);
  const us = [upstream(kind), upstream(kind)];
  ups.push(...us);
  for (const [i, u] of us.entries()) await addChannel(gw, { type: kind, url: u.url, models: [model], priority: 2 - i });
  return { us, hits: () => us.map((u) => u.hits) };
}

const oaiError = `data: ${JSON.stringify({ error: { message: 'Provider returned error', type: 'rate_limit_error', code: 429 } })}\n\n`;
const antError = `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } })}\n\n`;
/** `text` cut in pieces, each its own chunk on the wire (20 ms apart). */
const split = (text: string, at: number[]) => [0, ...at].map((a, i) => text.slice(a, [...at, text.length][i]));

describe('an error that is not whole in the first chunk', () => {
  const cases = [
    ['openai', 'after a keep-alive comment', [': OPENROUTER PROCESSING\n\n', oaiError], 429, 'rate_limit_error'],
    ['openai', 'split across chunks', split(oaiError, [9, 30, oaiError.length - 1]), 429, 'rate_limit_error'],
    ['openai', 'after comments, split', [': OPENROUTER PROCESSING\n\n', ': OPENROUTER PROCESSING\n\n', ...split(oaiError, [40])], 429, 'rate_limit_error'],
    ['anthropic', 'split after its event name', split(antError, [13, 50]), 503, 'overloaded_error'],
  ] as const;
  for (const [i, [kind, how, frames, status, type]] of cases.entries()) {
    test(`${kind}, ${how}: fails over before anything is sent; with no channel left, an HTTP error`, async () => {
      const { us, hits } = await pair(`split-${i}`, kind);
      us[0]!.fallback = { rawFrames: [...frames], chunkDelayMs: 20, ...(kind === 'anthropic' ? { response: () => slowSse(frames) } : {}) };
      const u = await keyedUser(gw);
      const r = await send(nodeOne(gw), u.key, msg(`split-${i}`, { stream: true }));
      expect(r.status).toBe(200);
      expect(r.text).toContain('message_stop');
      expect(r.text).not.toContain('event: error');
      expect(hits()).toEqual([1, 1]);
      us[1]!.fallback = us[0]!.fallback;
      const r2 = await send(nodeOne(gw), u.key, msg(`split-${i}`, { stream: true }));
      expect(r2.status).toBe(status);
      expect(r2.body.error.type).toBe(type);
      const rows = await gw.db.all('select cost from usage_logs where user_id = ? order by id', u.id);
      expect(rows.at(-1).cost).toBe(0);
    }, 15_000);
  }
});

/** An SSE body sending `frames` 20 ms apart (the Anthropic double has no raw frames). */
function slowSse(frames: readonly string[]): Response {
  const enc = new TextEncoder();
  let i = 0;
  const body = new ReadableStream<Uint8Array>({
    async pull(c) {
      if (i >= frames.length) return c.close();
      if (i > 0) await Bun.sleep(20);
      c.enqueue(enc.encode(frames[i++]!));
    },
  });
  return new Response(body, { headers: { 'content-type': 'text/event-stream' } });
}

/**
 * `frames` (20 ms apart) from the first of two channels for `model`: the request fails over, the second channel's answer
 * is served whole and billed once (not on usage the failed start showed), and the first channel's health hears of it
 * `failures` times; from both, the client gets `status` with `type`, billed nothing.
 */
async function failsOverThenErrors(model: string, kind: 'anthropic' | 'openai', frames: readonly string[], status: number, type: string, failures: number) {
  await setPrice(gw, model);
  const us = [upstream(kind), upstream(kind)];
  ups.push(...us);
  const ids: number[] = [];
  for (const [j, x] of us.entries()) ids.push(await addChannel(gw, { type: kind, url: x.url, models: [model], priority: 2 - j }));
  us[0]!.fallback = { rawFrames: [...frames], chunkDelayMs: 20, ...(kind === 'anthropic' ? { response: () => slowSse(frames) } : {}) };
  const u = await keyedUser(gw);
  const r = await send(nodeOne(gw), u.key, msg(model, { stream: true }));
  expect(r.status).toBe(200);
  expect([...r.text.matchAll(/"text":"([^"]*)"/g)].map((m) => m[1]).join('')).toBe('Hello there');
  expect(r.text).not.toContain('event: error');
  expect(r.text.match(/event: message_start/g)?.length).toBe(1);
  expect(us.map((x) => x.hits)).toEqual([1, 1]);
  expect(gw.services.relay.health.recentFailures(ids[0]!)).toBe(failures);
  gw.services.relay.quota.flush();
  // Billed once, for the answer the second channel gave (its own usage, far below the 5,000 prompt tokens shown).
  const [row] = await gw.db.all('select input_tokens, cost from usage_logs where user_id = ?', u.id);
  expect(row.input_tokens).toBeLessThan(100);
  us[1]!.fallback = us[0]!.fallback;
  const r2 = await send(nodeOne(gw), u.key, msg(model, { stream: true }));
  expect(r2.status).toBe(status);
  expect(r2.body.error.type).toBe(type);
  gw.services.relay.quota.flush();
  const rows = await gw.db.all('select cost from usage_logs where user_id = ? order by id', u.id);
  expect(rows.length).toBe(2);
  expect(rows[1].cost).toBe(0);
  expect(await gw.services.ledger.sum(u.id)).toBe(1_000_000 - rows[0].cost);
}

describe('a start that stays undecided', () => {
  test('a comment, then silence past the channel timeout: committed at the 2 s bound, and the answer arrives whole', async () => {
    // Held until the upstream spoke, the attempt's 3 s timeout would fail the channel over; committed at the bound,
    // the stream's idle limit (3 s of silence from then) lets the answer through, the read in flight included.
    await setPrice(gw, 'silent-start');
    const us = [upstream('openai'), upstream('openai')];
    ups.push(...us);
    for (const [i, u] of us.entries()) {
      const r = await gw.api('POST', '/api/channel/', { name: `silent-${i}`, type: 'openai', base_url: u.url, key: 'k', models: ['silent-start'], priority: 2 - i, timeout_ms: 3000 });
      expect(r.status).toBe(200);
    }
    const chunk = (delta: unknown, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    us[0]!.fallback = { rawFrames: [': PROCESSING\n\n', chunk({ content: 'Hello' }), chunk({ content: ' world' }), chunk({}, 'stop'), 'data: [DONE]\n\n'], pause: { afterFrames: 1, ms: 3800 } };
    const u = await keyedUser(gw);
    const r = await send(nodeOne(gw), u.key, msg('silent-start', { stream: true }));
    expect(r.status).toBe(200);
    expect(r.text).toContain('message_stop');
    expect([...r.text.matchAll(/"text":"([^"]*)"/g)].map((m) => m[1]).join('')).toBe('Hello world');
    expect(us.map((x) => x.hits)).toEqual([1, 0]);
  }, 15_000);
});

describe('a client that leaves while the start is read', () => {
  test('client_closed at once, the upstream cancelled, no failover, no health change', async () => {
    const { us, hits } = await pair('leave-start', 'openai');
    const chunk = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { content: 'late' }, finish_reason: 'stop' }] })}\n\n`;
    us[0]!.fallback = { rawFrames: [': PROCESSING\n\n', chunk, 'data: [DONE]\n\n'], pause: { afterFrames: 1, ms: 1500 } };
    const u = await keyedUser(gw);
    const ctl = new AbortController();
    const t0 = performance.now();
    const res = fetch(`${nodeOne(gw).url}/v1/messages`, { method: 'POST', signal: ctl.signal, headers: { 'content-type': 'application/json', 'x-api-key': u.key, ...V }, body: JSON.stringify(msg('leave-start', { stream: true })) });
    setTimeout(() => ctl.abort(), 300);
    await res.catch(() => undefined);
    let rows: any[] = [];
    for (let i = 0; i < 100 && !rows.length; i++) {
      rows = await gw.db.all('select status, error_code, cost from usage_logs where user_id = ?', u.id);
      if (!rows.length) await Bun.sleep(20);
    }
    // Settled when the client left, not when the upstream spoke again (1.5 s) or the start's 2 s bound ran out.
    expect(performance.now() - t0).toBeLessThan(1200);
    expect(rows).toEqual([{ status: 499, error_code: 'client_closed', cost: 0 }]);
    for (let i = 0; i < 50 && us[0]!.double.cancelled < 1; i++) await Bun.sleep(20);
    expect(us[0]!.double.cancelled).toBe(1);
    expect(hits()).toEqual([1, 0]);
  }, 15_000);
});

describe('a stream that ends before its first event', () => {
  // Known before anything is committed: as empty as a stream without a byte, so it fails over like one, instead of
  // reaching the client as a 200 that holds only "the upstream stream ended unexpectedly".
  const cases = [
    ['openai', 'keep-alive comments only', [': OPENROUTER PROCESSING\n\n', ': OPENROUTER PROCESSING\n\n']],
    ['anthropic', 'a ping only', ['event: ping\ndata: {"type": "ping"}\n\n']],
    ['openai', 'an event never finished', [': c\n\n', 'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}']],
  ] as const;
  for (const [i, [kind, how, frames]] of cases.entries()) {
    test(`${kind}, ${how}: fails over before anything is sent`, async () => {
      const { us, hits } = await pair(`ends-${i}`, kind);
      us[0]!.fallback = { rawFrames: [...frames], chunkDelayMs: 20, ...(kind === 'anthropic' ? { response: () => slowSse(frames) } : {}) };
      const u = await keyedUser(gw);
      const r = await send(nodeOne(gw), u.key, msg(`ends-${i}`, { stream: true }));
      expect(r.status).toBe(200);
      expect(r.text).not.toContain('event: error');
      expect(r.text).toContain('message_stop');
      expect(hits()).toEqual([1, 1]);
    }, 15_000);
  }
});

describe('a first chunk that finishes with "error" and has no error object (OpenRouter\'s shape without its member)', () => {
  // The stream decoder ends an answer on such a chunk, so as the first event it was committed: a 200 holding only an
  // `error` event, billed the usage it carried, no failover, and no word to the channel's health.
  const failed = (extra: object) => `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { content: '' }, finish_reason: 'error' }], ...extra })}\n\n`;
  const cases = [
    ['no usage', [failed({})]],
    ['usage in the chunk', [failed({ usage: { prompt_tokens: 5000, completion_tokens: 80 } })]],
    ['an error that is a string, after a comment', [': OPENROUTER PROCESSING\n\n', failed({ error: 'Provider returned error' })]],
  ] as const;
  for (const [i, [how, frames]] of cases.entries()) {
    test(`${how}: fails over before anything is sent, counts against the channel, nothing billed for it; alone, a 502`, async () => {
      await failsOverThenErrors(`fin-err-${i}`, 'openai', frames, 502, 'api_error', 1);
    }, 15_000);
  }
});

describe('an error after events that show the client nothing (a role-only delta, `choices: []`, `{}`, `message_start`)', () => {
  // Such events decided the start: the 200 and `message_start` were committed, so the error that followed reached
  // the client as a 200 ending in an `error` event, with no failover and no word to the channel's health.
  const oai = (choices: unknown, extra: object = {}) => `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices, ...extra })}\n\n`;
  const role = oai([{ index: 0, delta: { role: 'assistant', content: '', refusal: null }, logprobs: null, finish_reason: null }], { usage: null });
  const finishedError = oai([{ index: 0, delta: { content: '' }, finish_reason: 'error' }]);
  const start = `event: message_start\ndata: ${JSON.stringify({ type: 'message_start', message: { id: 'msg_x', type: 'message', role: 'assistant', model: 'm', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5000, output_tokens: 1 } } })}\n\n`;
  const ping = 'event: ping\ndata: {"type": "ping"}\n\n';
  // The channel's health counts the error as it counts an HTTP answer of its status: a 429 never (a rate limit).
  const oaiOverloaded = `data: ${JSON.stringify({ error: { message: 'Overloaded', type: 'overloaded_error' } })}\n\n`;
  const cases = [
    ['openai', 'a role-only delta, then an error object', [role, oaiError], 429, 'rate_limit_error', 0],
    ['openai', '`choices: []`, then a choice finishing with "error"', [oai([]), finishedError], 502, 'api_error', 1],
    ['openai', '`{}` and a comment, then an error object', ['data: {}\n\n', ': OPENROUTER PROCESSING\n\n', oaiOverloaded], 503, 'overloaded_error', 1],
    ['openai', 'both in one chunk', [role + oaiOverloaded], 503, 'overloaded_error', 1],
    ['anthropic', 'message_start, then overloaded', [start, antError], 503, 'overloaded_error', 1],
    ['anthropic', 'a ping, message_start and a ping, then overloaded', [ping, start, ping, antError], 503, 'overloaded_error', 1],
    ['anthropic', 'message_start and overloaded in one chunk', [start + antError], 503, 'overloaded_error', 1],
  ] as const;
  for (const [i, [kind, how, frames, status, type, failures]] of cases.entries()) {
    test(`${kind}, ${how}: fails over, counts against the channel, nothing billed for it; alone, an HTTP error`, async () => {
      await failsOverThenErrors(`empty-first-${i}`, kind, frames, status, type, failures);
    }, 15_000);
  }

  test('a role-only delta, then silence past the 2 s bound: committed with it, and the answer arrives whole and in order', async () => {
    const { us, hits } = await pair('empty-then-silent', 'openai');
    const content = (t: string) => oai([{ index: 0, delta: { content: t }, finish_reason: null }]);
    us[0]!.fallback = { rawFrames: [role, content('Hello'), content(' world'), oai([{ index: 0, delta: {}, finish_reason: 'stop' }]), 'data: [DONE]\n\n'], pause: { afterFrames: 1, ms: 2600 } };
    const u = await keyedUser(gw);
    const r = await send(nodeOne(gw), u.key, msg('empty-then-silent', { stream: true }));
    expect(r.status).toBe(200);
    expect([...r.text.matchAll(/"text":"([^"]*)"/g)].map((m) => m[1]).join('')).toBe('Hello world');
    expect(r.text).toContain('message_stop');
    expect(hits()).toEqual([1, 0]);
  }, 15_000);

  test('anthropic: message_start held with the events after it: every event reaches the client, in order', async () => {
    const { us, hits } = await pair('held-native', 'anthropic');
    const ev = (o: { type: string }) => `event: ${o.type}\ndata: ${JSON.stringify(o)}\n\n`;
    const rest = [
      ping,
      ev({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } } as any),
      ev({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hi' } } as any),
      ev({ type: 'content_block_stop', index: 0 } as any),
      ev({ type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 2 } } as any),
      ev({ type: 'message_stop' }),
    ];
    const frames = [start.replace('"model":"m"', '"model":"held-native"'), ...rest];
    us[0]!.fallback = { response: () => slowSse(frames) };
    const u = await keyedUser(gw);
    const r = await send(nodeOne(gw), u.key, msg('held-native', { stream: true }));
    expect(r.status).toBe(200);
    const names = [...r.text.matchAll(/^event: (\w+)$/gm)].map((m) => m[1]).filter((n) => n !== 'ping');
    expect(names).toEqual(['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
    expect(r.text).toContain('"text":"Hi"');
    expect(hits()).toEqual([1, 0]);
  }, 15_000);
});
