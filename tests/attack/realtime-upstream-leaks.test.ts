/**
 * Attack: read the channel's key (or its internal URL) through upstream error text the realtime relay passed on
 * unscrubbed, and get responses relayed unbilled. Only `error` events sent as text frames were scrubbed:
 * - a failed `response.done` carries the upstream's error in `response.status_details.error` (OpenAI's shape),
 *   and a failed input transcription in `error`: both reached the client verbatim;
 * - an upstream frame sent binary was relayed unread, though the official SDK (`ws`: `Buffer.toString()`) reads it
 *   as an event: an `error` in one went out unscrubbed, and a response announced and reported in binary frames
 *   was never billed;
 * - the scrubber knew only the channel's first key, not its others (an upstream may echo a sibling key).
 * Real sockets, realtime upstream double.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';
import { bearerOf, channel, open, wire, type Wiring } from '../helpers/realtime-wiring';

const KEY = 'sk-proj-Rt9Xb+T4mN7p/L2vR8sK1wY6hJ3cF5dG0aE';
const SIBLING = 'sk-proj-Qw8Zc+U5nB6o/K3tS9jL2xV7gH4dE1fA9bY';
const INTERNAL = 'wss://upstream.internal.example:8443/v1/realtime';
let g: Wiring;
let u: RealtimeUpstreamDouble;

beforeAll(async () => {
  u = startRealtimeUpstream();
  g = await wire({ REALTIME_MAX_SESSIONS_PER_KEY: '0' });
  g.channels.push(channel(1, u, { apiKey: KEY, keys: [{ apiKey: KEY }, { apiKey: SIBLING }] } as any));
});
afterAll(async () => {
  await g.stop();
  await u.stop();
});

async function session() {
  const k = await g.addKey(50_000_000);
  const c = open('/v1/realtime?model=gpt-realtime', bearerOf(k.key), g);
  await c.opened;
  await c.waitFor('session.created');
  return { c, conn: u.connections.at(-1)!.id, userId: k.userId };
}

const secretFree = (text: string) => {
  for (const s of [KEY, SIBLING]) {
    for (let i = 0; i + 10 <= s.length; i++) expect(text).not.toContain(s.slice(i, i + 10));
  }
  expect(text).not.toContain('upstream.internal.example');
};

/** Every frame the client got, binary ones decoded (as the SDK reads them). */
const seen = (c: { frames: Array<string | Buffer> }) => c.frames.map((f) => (typeof f === 'string' ? f : Buffer.from(f).toString('utf8'))).join('\n');

const waitText = async (c: { frames: Array<string | Buffer> }, needle: string) => {
  const end = Date.now() + 3000;
  while (!seen(c).includes(needle)) {
    if (Date.now() > end) throw new Error(`no frame with ${needle}`);
    await Bun.sleep(2);
  }
};

describe('upstream error text outside text error events carries no channel secret', () => {
  test("a failed response.done's status_details.error is scrubbed (and the response still billed)", async () => {
    const { c, conn, userId } = await session();
    const resp = { id: 'resp_fail_1', object: 'realtime.response', output: [], max_output_tokens: 'inf' };
    u.send(JSON.stringify({ type: 'response.created', event_id: 'ev_c', response: { ...resp, status: 'in_progress', usage: null } }), conn);
    u.send(JSON.stringify({
      type: 'response.done', event_id: 'ev_d',
      response: {
        ...resp, status: 'failed',
        status_details: { type: 'failed', error: { type: 'invalid_request_error', code: 'invalid_api_key', message: `Incorrect API key provided: ${KEY} at ${INTERNAL}` } },
        usage: { input_tokens: 5, output_tokens: 1 },
      },
    }), conn);
    const done = await c.waitFor('response.done');
    expect(done.response.status).toBe('failed');
    expect(done.response.status_details.error.message).toContain('Incorrect API key provided: [redacted]');
    expect(done.response.usage).toEqual({ input_tokens: 5, output_tokens: 1 });
    secretFree(seen(c));
    await Bun.sleep(20);
    const n = g.h.sqlite.query("select count(*) as n from usage_logs where user_id = ? and kind = 'realtime'").get(userId) as any;
    expect(n.n).toBe(1);
  });

  test('a failed transcription error is scrubbed', async () => {
    const { c, conn } = await session();
    u.send(JSON.stringify({
      type: 'conversation.item.input_audio_transcription.failed', event_id: 'ev_t', item_id: 'item_1', content_index: 0,
      error: { type: 'transcription_error', code: 'auth', message: `upstream refused key ${SIBLING}`, param: null },
    }), conn);
    const ev = await c.waitFor('conversation.item.input_audio_transcription.failed');
    expect(ev.error.message).toContain('[redacted]');
    secretFree(seen(c));
  });

  test("an error event naming another of the channel's keys is scrubbed", async () => {
    const { c, conn } = await session();
    u.send(JSON.stringify({ type: 'error', event_id: 'ev_s', error: { type: 'invalid_request_error', code: 'x', message: `key ${SIBLING} is rate limited`, param: null, event_id: null } }), conn);
    const ev = await c.waitFor('error');
    expect(ev.error.message).toContain('[redacted]');
    secretFree(seen(c));
    expect(c.close).toBeNull();
  });
});

describe('a hostile upstream error event nested deep or wide', () => {
  test("a secret nested in the error (OpenRouter's error.metadata.raw, a key name) is scrubbed", async () => {
    const { c, conn } = await session();
    u.send(JSON.stringify({
      type: 'error', event_id: 'ev_n',
      error: { type: 'invalid_request_error', code: 'provider_error', message: 'Provider returned error', param: null, event_id: null, metadata: { raw: `{"error":"Incorrect API key provided: ${KEY}"}`, provider_name: 'x', hints: [[`see ${INTERNAL}`]], [SIBLING]: 1 } },
    }), conn);
    const ev = await c.waitFor('error');
    expect(ev.error.message).toBe('Provider returned error');
    expect(ev.error.metadata.raw).toContain('[redacted]');
    secretFree(seen(c));
  });

  test('an error event nested 200,000 deep neither kills the gateway nor passes unscrubbed; the session goes on', async () => {
    const { c, conn, userId } = await session();
    const n = 200_000;
    u.send(`{"type":"error","event_id":"ev_deep","error":{"type":"server_error","code":"x","message":"bad key ${KEY}","param":null,"event_id":null},"x":${'['.repeat(n)}${']'.repeat(n)}}`, conn);
    const ev = await c.waitFor('error');
    expect(ev.event_id).toBe('ev_deep');
    expect(ev.error.message).toBe('bad key [redacted]');
    // A failed response.done as deep: scrubbed, relayed, billed.
    const resp = { id: 'resp_deep', object: 'realtime.response', output: [], max_output_tokens: 'inf' };
    u.send(JSON.stringify({ type: 'response.created', event_id: 'ev_dc', response: { ...resp, status: 'in_progress', usage: null } }), conn);
    u.send(`{"type":"response.done","event_id":"ev_dd","response":{"id":"resp_deep","status":"failed","status_details":{"type":"failed","error":{"type":"x","message":"key ${KEY}","nested":${'['.repeat(n)}${']'.repeat(n)}}},"usage":{"input_tokens":5,"output_tokens":1}}}`, conn);
    const done = await c.waitFor('response.done');
    expect(done.response.status_details.error.message).toBe('key [redacted]');
    u.send('{"type":"response.output_text.delta","event_id":"ev_after","delta":"still here"}', conn);
    await waitText(c, 'ev_after');
    secretFree(seen(c));
    expect(c.close).toBeNull();
    await Bun.sleep(20);
    const row = g.h.sqlite.query("select count(*) as n from usage_logs where user_id = ? and kind = 'realtime'").get(userId) as any;
    expect(row.n).toBe(1);
  });
});

describe('binary upstream frames are read as the SDK reads them', () => {
  test('a binary error event is scrubbed, and stays binary', async () => {
    const { c, conn } = await session();
    u.send(Buffer.from(JSON.stringify({ type: 'error', event_id: 'ev_b', error: { type: 'invalid_request_error', code: 'bad', message: `Incorrect API key provided: ${KEY}`, param: null, event_id: null } })), conn);
    await waitText(c, 'ev_b');
    const frame = c.frames.find((f) => typeof f !== 'string' && Buffer.from(f).toString('utf8').includes('ev_b'));
    expect(frame).toBeDefined();
    expect(Buffer.from(frame as Buffer).toString('utf8')).toContain('Incorrect API key provided: [redacted]');
    secretFree(seen(c));
  });

  test('a response announced and reported in binary frames is billed', async () => {
    const { c, conn, userId } = await session();
    const resp = { id: 'resp_bin_1', object: 'realtime.response', output: [], max_output_tokens: 'inf' };
    u.send(Buffer.from(JSON.stringify({ type: 'response.created', event_id: 'ev_bc', response: { ...resp, status: 'in_progress', usage: null } })), conn);
    u.send(Buffer.from(JSON.stringify({ type: 'response.output_text.delta', event_id: 'ev_bx', response_id: resp.id, item_id: 'it', output_index: 0, content_index: 0, delta: 'hello there' })), conn);
    u.send(Buffer.from(JSON.stringify({ type: 'response.done', event_id: 'ev_bd', response: { ...resp, status: 'completed', usage: { input_tokens: 1000, output_tokens: 200 } } })), conn);
    await waitText(c, 'ev_bd');
    await Bun.sleep(30);
    const row = g.h.sqlite.query("select input_tokens, output_tokens from usage_logs where user_id = ? and kind = 'realtime'").get(userId) as any;
    expect(row).toEqual({ input_tokens: expect.any(Number), output_tokens: 200 });
    expect(row.input_tokens).toBeGreaterThan(0);
    // Unchanged frames still pass byte for byte, binary.
    expect(c.frames.filter((f) => typeof f !== 'string').length).toBe(3);
  });
});
