/**
 * Attack: many Anthropic-compatible upstreams (proxies in front of other providers) send `input_tokens: 0` in
 * message_start and the real count only in the final message_delta. A client that reads the whole answer and leaves
 * before that message_delta (or any stream cut there) was billed its prompt as 0 input tokens: the gateway took
 * message_start's 0 for the upstream's count. No real request has no input at all (Anthropic counts the prompt in
 * input_tokens plus its cache reads and writes), so a total of 0 is no count: it is billed like a missing one, at the
 * reserved input bound, flagged `estimated`. Real gateway, raw upstream over HTTP, raw fetch client.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, setPrice, V } from '../e2e/relay-setup';

const PROMPT = 'The quick brown fox jumps over the lazy dog. '.repeat(100); // 4,500 characters
const sse = (ev: string, data: object) => `event: ${ev}\ndata: ${JSON.stringify({ type: ev, ...data })}\n\n`;
const START = (usage: object) => sse('message_start', { message: { id: 'msg_z', type: 'message', role: 'assistant', model: 'x', content: [], stop_reason: null, stop_sequence: null, usage } });
const BODY = sse('content_block_start', { index: 0, content_block: { type: 'text', text: '' } })
  + sse('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'hello world, here is the answer' } })
  + sse('content_block_stop', { index: 0 });
const END = (usage: object) => sse('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage }) + sse('message_stop', {});

/** What the upstream sends: `head` at once, then after `pauseMs` the `tail` (null: nothing, the stream ends there). */
let script: { head: string; pauseMs: number; tail: string | null } = { head: '', pauseMs: 0, tail: null };
const server = Bun.serve({
  port: 0, hostname: '127.0.0.1',
  async fetch(req) {
    await req.text();
    const { head, pauseMs, tail } = script;
    const enc = new TextEncoder();
    return new Response(new ReadableStream<Uint8Array>({
      async start(c) {
        c.enqueue(enc.encode(head));
        await Bun.sleep(pauseMs);
        // null: the upstream ends the stream there, without the message_delta or message_stop.
        try { if (tail !== null) c.enqueue(enc.encode(tail)); c.close(); } catch { /* the gateway went away */ }
      },
    }), { headers: { 'content-type': 'text/event-stream' } });
  },
});

let gw: TestGateway;
beforeAll(async () => {
  gw = await startGateway();
  await addChannel(gw, { type: 'anthropic', url: `http://127.0.0.1:${server.port}`, models: ['zero-in'] });
  await setPrice(gw, 'zero-in', { input: 1_000_000, output: 1_000_000 });
});
afterAll(async () => { await gw.stop(); server.stop(true); });

async function rowOf(id: string) {
  const t0 = Date.now();
  for (;;) {
    gw.services.relay.quota.flush();
    const row = await gw.db.get('select input_tokens, output_tokens, cost, usage_flag, error_code from usage_logs where request_id = ?', id);
    if (row || Date.now() - t0 > 5000) return row as Record<string, any>;
    await Bun.sleep(20);
  }
}

/** Streams the request; leaves once `until` was read (null: reads to the end). Returns the usage row. */
async function run(until: string | null) {
  const u = await keyedUser(gw, 1_000_000);
  const ctrl = new AbortController();
  const res = await fetch(`${gw.url}/v1/messages`, {
    method: 'POST', signal: ctrl.signal, headers: { 'content-type': 'application/json', ...V, 'x-api-key': u.key },
    body: JSON.stringify({ model: 'zero-in', max_tokens: 300, stream: true, messages: [{ role: 'user', content: PROMPT }] }),
  });
  expect(res.status).toBe(200);
  const id = res.headers.get('request-id')!;
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let seen = '';
  for (;;) {
    if (until !== null && seen.includes(until)) break;
    const r = await reader.read().catch(() => ({ done: true as const, value: undefined }));
    if (r.done) break;
    seen += dec.decode(r.value);
  }
  if (until !== null) {
    expect(seen).not.toContain('message_delta');
    ctrl.abort();
  }
  const row = await rowOf(id);
  expect(await gw.services.ledger.sum(u.id)).toBe(1_000_000 - row.cost);
  return row;
}

describe('a message_start reporting no input at all is no count', () => {
  test('the client leaves after the last block, before the message_delta with the real count', async () => {
    script = { head: START({ input_tokens: 0, output_tokens: 0 }) + BODY, pauseMs: 800, tail: END({ input_tokens: 1200, output_tokens: 9 }) };
    const row = await run('content_block_stop');
    // The prompt's reserved bound (2 characters a token: about 2,250), never 0.
    expect(row.input_tokens).toBeGreaterThan(2000);
    expect(row.usage_flag).toContain('estimated');
    expect(row.error_code).toBe('client_closed');
  });

  test('the upstream cuts the stream there', async () => {
    script = { head: START({ input_tokens: 0, output_tokens: 0 }) + BODY, pauseMs: 50, tail: null };
    const row = await run(null);
    expect(row.input_tokens).toBeGreaterThan(2000);
    expect(row.error_code).toBe('upstream_stream_cut');
  });

  test('the same upstream, read to the end: billed on the message_delta\'s count', async () => {
    script = { head: START({ input_tokens: 0, output_tokens: 0 }) + BODY, pauseMs: 10, tail: END({ input_tokens: 1200, output_tokens: 9 }) };
    expect(await run(null)).toMatchObject({ input_tokens: 1200, output_tokens: 9, usage_flag: '', error_code: '' });
  });

  test('a prompt read from the cache (input_tokens 0, cache reads) is a count, billed as reported', async () => {
    script = { head: START({ input_tokens: 0, cache_read_input_tokens: 1500, output_tokens: 1 }) + BODY, pauseMs: 50, tail: null };
    const row = await run(null);
    expect(row).toMatchObject({ input_tokens: 0, error_code: 'upstream_stream_cut' });
  });
});
