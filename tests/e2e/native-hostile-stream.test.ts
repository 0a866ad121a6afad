/**
 * A hostile or buggy "Anthropic-compatible" upstream on a native channel, streaming: whatever usage the client
 * is shown, the gateway bills at least that. Anthropic's counts are cumulative, so a later event never lowers
 * the bill below a count already reported; and an event the gateway would otherwise forward as bytes (its
 * name says content_block_delta or ping) whose data is a message_delta or message_start (the official SDKs
 * read an event's `type`, data-only clients read only the data) has its usage read too.
 */
import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { SseParser } from '@gw/formats';
import { addChannel, balanceOf, keyedUser, send, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
let ant: Scripted;
let user: Awaited<ReturnType<typeof keyedUser>>;
const PRICE = { input: 1_000_000, output: 2_000_000, cache_read: 100_000, cache_write: 1_250_000 };
const REPLY = 'Hello there, this is a reply';

beforeAll(async () => {
  gw = await startGateway();
  ant = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['ant'] });
  expect((await gw.api('PUT', '/api/pricing/', { model: 'ant', ...PRICE })).status).toBe(200);
  user = await keyedUser(gw, 100_000_000);
}, 30_000);
afterAll(async () => { await ant.stop(); await gw.stop(); });

const logOf = (id: string) => gw.db.get('select * from usage_logs where request_id = ?', id);

const START = (usage: string) => `event: message_start\ndata: {"type":"message_start","message":{"id":"msg_h","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":${usage}}}\n\n`;
const TEXT = [
  'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n',
  `event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"${REPLY}"}}\n\n`,
  'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
];
const DELTA = (usage: string) => `event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":${usage}}\n\n`;
const STOP = 'event: message_stop\ndata: {"type":"message_stop"}\n\n';

/** Streams `frames` (one write each, or all in one chunk) and returns the usage row and what the client read. */
async function run(frames: string[], oneChunk = true, extra: Record<string, unknown> = {}) {
  ant.queue.push({
    response: () => {
      const enc = new TextEncoder();
      const body = oneChunk ? frames.join('') : new ReadableStream<Uint8Array>({
        async start(c) {
          for (const f of frames) { c.enqueue(enc.encode(f)); await Bun.sleep(2); }
          c.close();
        },
      });
      return new Response(body, { headers: { 'content-type': 'text/event-stream' } });
    },
  });
  const r = await send(gw, user.key, { model: 'ant', max_tokens: 1000, stream: true, messages: [{ role: 'user', content: 'Say hello' }], ...extra });
  expect(r.status).toBe(200);
  const id = r.headers.get('request-id')!;
  const events = [...new SseParser().push(r.text), ...new SseParser().end()];
  gw.services.relay.quota.flush();
  return { row: await logOf(id) as Record<string, any>, events };
}

/** The largest output_tokens any event the client received reports, read by the event's data `type` as the SDKs do. */
function shownOutput(events: Array<{ event?: string; data: string }>): number {
  let max = 0;
  for (const e of events) {
    let d: any;
    try { d = JSON.parse(e.data); } catch { continue; }
    const u = d?.type === 'message_delta' ? d.usage : d?.type === 'message_start' ? d.message?.usage : undefined;
    if (typeof u?.output_tokens === 'number') max = Math.max(max, u.output_tokens);
  }
  return max;
}

describe('native streams: a later event never lowers the bill', () => {
  for (const oneChunk of [true, false]) {
    test(`output_tokens falling across message_delta events is billed at its highest (${oneChunk ? 'one chunk' : 'chunk per event'})`, async () => {
      const { row, events } = await run([START('{"input_tokens":40,"output_tokens":1}'), ...TEXT, DELTA('{"output_tokens":700}'), DELTA('{"output_tokens":3}'), STOP], oneChunk);
      expect(shownOutput(events)).toBe(700);
      expect(row.output_tokens).toBe(700);
      expect(row.input_tokens).toBe(40);
    });
  }

  test('input_tokens lowered by message_delta after message_start is billed at message_start\'s', async () => {
    const { row } = await run([START('{"input_tokens":900,"output_tokens":1,"cache_read_input_tokens":300}'), ...TEXT, DELTA('{"input_tokens":2,"output_tokens":9,"cache_read_input_tokens":0}'), STOP]);
    expect(row).toMatchObject({ input_tokens: 900, cache_read_tokens: 300, output_tokens: 9 });
  });

  test('a second message_start with lower counts does not lower them (the stream ends there)', async () => {
    const { row } = await run([START('{"input_tokens":900,"output_tokens":1}'), START('{"input_tokens":1,"output_tokens":1}'), ...TEXT, DELTA('{"output_tokens":9}'), STOP]);
    expect(row).toMatchObject({ input_tokens: 900, error_code: 'upstream_stream_cut' });
  });

  test('web searches and 1-hour cache writes lowered by message_delta keep message_start\'s', async () => {
    const { row } = await run([
      START('{"input_tokens":40,"output_tokens":1,"cache_creation_input_tokens":500,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":500},"server_tool_use":{"web_search_requests":3}}'),
      ...TEXT,
      DELTA('{"output_tokens":9,"cache_creation_input_tokens":500,"cache_creation":{"ephemeral_5m_input_tokens":500,"ephemeral_1h_input_tokens":0},"server_tool_use":{"web_search_requests":1}}'),
      STOP,
    ], true, { tools: [{ type: 'web_search_20250305', name: 'web_search', max_uses: 5 }] });
    expect(row).toMatchObject({ web_search_requests: 3, cache_write_tokens: 500, cache_write_1h_tokens: 500, output_tokens: 9 });
  });

  test('an unusable later output count is replaced by at least the highest one reported', async () => {
    const { row } = await run([START('{"input_tokens":40,"output_tokens":1}'), ...TEXT, DELTA('{"output_tokens":600}'), DELTA('{"output_tokens":-1}'), STOP]);
    expect(row.output_tokens).toBe(600);
    expect(row.usage_flag).toBe('invalid');
  });

  // The reserved input bound of "Say hello" is a few dozen tokens: billing an unusable count at it alone billed 21
  // input and 21 cache reads for a stream whose message_start showed the client 900 and 3,000.
  for (const bad of ['-1', '"x"', '1.5', 'null']) {
    test(`an unusable later input or cache count (${bad}) is billed at least the highest one reported`, async () => {
      const { row } = await run([
        START('{"input_tokens":900,"output_tokens":1,"cache_read_input_tokens":3000,"cache_creation_input_tokens":2000}'), ...TEXT,
        DELTA(`{"input_tokens":${bad},"output_tokens":9,"cache_read_input_tokens":${bad},"cache_creation_input_tokens":${bad}}`), STOP]);
      expect(row).toMatchObject({ input_tokens: 900, cache_read_tokens: 3000, cache_write_tokens: 2000, output_tokens: 9, usage_flag: 'invalid' });
      // 900 × 1 + 9 × 2 + 3000 × 0.1 + 2000 × 1.25 per million units each: 900 + 18 + 300 + 2500.
      expect(row.cost).toBe(3718);
    });
  }
});

describe('native streams: usage in an event named otherwise is billed', () => {
  const HIDDEN = [
    // Named content_block_delta (forwarded as bytes), data a message_delta: the SDKs read it as one.
    'event: content_block_delta\ndata: {"type":"message_delta","delta":{"stop_reason":null,"stop_sequence":null},"usage":{"output_tokens":800}}\n\n',
    // The same with the type repeated: JSON parsers keep the last one.
    'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"},"type":"message_delta","usage":{"output_tokens":800}}\n\n',
    // A ping whose key is escaped (us\\u0061ge is usage once parsed).
    'event: ping\ndata: {"type":"ping","type":"message_delta","us\\u0061ge":{"output_tokens":800}}\n\n',
    // No event name at all (data-only clients read it).
    'data: {"type":"message_delta","delta":{"stop_reason":null,"stop_sequence":null},"usage":{"output_tokens":800}}\n\n',
  ];
  for (const [i, hidden] of HIDDEN.entries()) {
    for (const oneChunk of [true, false]) {
      test(`variant ${i} (${oneChunk ? 'one chunk' : 'chunk per event'})`, async () => {
        const { row, events } = await run([START('{"input_tokens":40,"output_tokens":1}'), ...TEXT, hidden, DELTA('{"output_tokens":5}'), STOP], oneChunk);
        expect(events.some((e) => e.data.includes('800'))).toBe(true); // the client received it
        expect(row.output_tokens).toBeGreaterThanOrEqual(800);
      });
    }
  }

  test('the same through the generic parser (\\r\\n line ends)', async () => {
    const frames = [START('{"input_tokens":40,"output_tokens":1}'), ...TEXT, HIDDEN[0]!, DELTA('{"output_tokens":5}'), STOP].map((f) => f.replace(/\n/g, '\r\n'));
    const { row } = await run(frames);
    expect(row.output_tokens).toBe(800);
  });
});

describe('native streams: a second message_start ends the stream with the gateway\'s error', () => {
  /** What the client read, by its data `type` as the SDKs read it. */
  const types = (events: Array<{ data: string }>) => events.map((e) => { try { return JSON.parse(e.data).type; } catch { return '?'; } }).filter((t) => t !== 'ping');
  const SECOND = {
    named: START('{"input_tokens":5000,"output_tokens":1}'),
    // Named ping (forwarded as bytes otherwise), its data a message_start without usage: the SDKs read it as one.
    'in a ping': 'event: ping\ndata: {"type":"message_start","message":{"id":"msg_2","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null}}\n\n',
    'in a content_block_delta, type repeated': 'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"},"type":"message_start","message":{"id":"msg_2"}}\n\n',
    'with no event name': 'data: {"type":"message_start","message":{"id":"msg_2","type":"message","role":"assistant","content":[]}}\n\n',
    'escaped': 'event: ping\ndata: {"type":"message_st\\u0061rt","message":{"id":"msg_2"}}\n\n',
  };
  for (const [label, second] of Object.entries(SECOND)) {
    for (const crlf of [false, true]) {
      for (const oneChunk of crlf ? [true] : [true, false]) {
        test(`${label} (${crlf ? 'generic parser, \\r\\n' : oneChunk ? 'one chunk' : 'chunk per event'})`, async () => {
          const before = await balanceOf(gw, user.id);
          let frames = [START('{"input_tokens":40,"output_tokens":1}'), ...TEXT, second, ...TEXT, DELTA('{"output_tokens":900}'), STOP];
          if (crlf) frames = frames.map((f) => f.replace(/\n/g, '\r\n'));
          const { row, events } = await run(frames, oneChunk);
          // One message_start, the first answer's text, then the gateway's error: nothing after it.
          expect(types(events)).toEqual(['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'error']);
          const err = JSON.parse(events.at(-1)!.data);
          expect(err).toEqual({ type: 'error', error: { type: 'api_error', message: 'The upstream stream started a second message.' } });
          expect(events.some((e) => e.data.includes('msg_2') || e.data.includes('5000') || e.data.includes('900'))).toBe(false);
          // Billed for what was delivered (message_start's input, the text's estimate), an upstream fault.
          expect(row).toMatchObject({ input_tokens: 40, status: 200, error_code: 'upstream_stream_cut', usage_flag: 'estimated' });
          expect(row.output_tokens).toBeGreaterThan(0);
          expect(row.output_tokens).toBeLessThan(900);
          expect(before - (await balanceOf(gw, user.id))).toBe(row.cost);
          const ledger = await gw.db.get('select coalesce(sum(amount), 0) as s from ledger where user_id = ?', user.id) as { s: number };
          expect(Number(ledger.s)).toBe(await balanceOf(gw, user.id));
        });
      }
    }
  }

  test('the official SDK reports the gateway\'s error, not its own "Unexpected event order"', async () => {
    ant.queue.push({ response: () => new Response([START('{"input_tokens":40,"output_tokens":1}'), ...TEXT, START('{"input_tokens":40,"output_tokens":1}'), ...TEXT, DELTA('{"output_tokens":9}'), STOP].join(''), { headers: { 'content-type': 'text/event-stream' } }) });
    const client = new Anthropic({ apiKey: user.key, baseURL: gw.url, maxRetries: 0 });
    const e = await client.messages.stream({ model: 'ant', max_tokens: 100, messages: [{ role: 'user', content: 'Say hello' }] }).finalMessage().catch((x) => x);
    expect(e).toBeInstanceOf(Anthropic.APIError);
    expect(String(e.message)).toContain('The upstream stream started a second message.');
    expect(String(e.message)).not.toContain('Unexpected event order');
  });

  test('an honest stream whose text names message_start (escaped quotes) is forwarded byte for byte', async () => {
    const text = 'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"{\\"type\\":\\"message_start\\"}"}}\n\n';
    const body = [TEXT[0]!, text, TEXT[2]!, DELTA('{"output_tokens":9}'), STOP];
    const { row, events } = await run([START('{"input_tokens":40,"output_tokens":1}'), ...body]);
    expect(types(events)).toEqual(['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
    expect(row).toMatchObject({ input_tokens: 40, output_tokens: 9, error_code: '' });
    const raw = events.slice(1).map((e) => `event: ${e.event}\ndata: ${e.data}\n\n`);
    expect(raw).toEqual(body);
  });
});

// Anthropic's message_delta comes after the last content block, and its output_tokens counts the whole answer. An
// upstream that sends it first (or sends more content after it) had everything after it billed at that early count:
// 4,000 characters of text after `"output_tokens":1` billed 1 output token.
describe('native streams: content after a message_delta is billed on top of its count', () => {
  const LONG = 'lorem ipsum '.repeat(333); // 3,996 characters: about 1,000 tokens at the estimate
  const BLOCK = [
    'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n',
    `event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"${LONG}"}}\n\n`,
    'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
  ];
  for (const oneChunk of [true, false]) {
    const how = oneChunk ? 'one chunk' : 'chunk per event';
    test(`a message_delta before the content (${how})`, async () => {
      const { row, events } = await run([START('{"input_tokens":40,"output_tokens":1}'), DELTA('{"output_tokens":1}'), ...BLOCK, STOP], oneChunk);
      expect(events.map((e) => e.event)).toContain('content_block_delta');
      // 1 reported, then about 1,000 estimated (3,996 characters at 4 a token).
      expect(row.output_tokens).toBeGreaterThanOrEqual(990);
      expect(row.output_tokens).toBeLessThanOrEqual(1010);
      expect(row.input_tokens).toBe(40);
    });

    test(`content between two message_deltas is covered by the later count (${how})`, async () => {
      const { row } = await run([START('{"input_tokens":40,"output_tokens":1}'), DELTA('{"output_tokens":1}'), ...BLOCK, DELTA('{"output_tokens":1200}'), STOP], oneChunk, { max_tokens: 4000 });
      expect(row).toMatchObject({ output_tokens: 1200, usage_flag: '' });
    });

    test(`a stream cut after content that followed a message_delta (${how})`, async () => {
      const { row } = await run([START('{"input_tokens":40,"output_tokens":1}'), DELTA('{"output_tokens":5}'), ...BLOCK], oneChunk);
      expect(row.output_tokens).toBeGreaterThanOrEqual(995);
      expect(row.error_code).toBe('upstream_stream_cut');
    });
  }
});
