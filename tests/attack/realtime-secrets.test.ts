/**
 * Attack: read the channel's key through the realtime relay. /v1/messages scrubs every upstream error,
 * but the realtime relay passed upstream frames and close reasons through byte for byte, so an upstream
 * `error` event or close reason naming the key (as "Incorrect API key provided: …" does on many
 * OpenAI-compatible servers) reached the client verbatim. Real sockets, realtime upstream double.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';
import { bearerOf, channel, open, wire, type Wiring } from '../helpers/realtime-wiring';

const KEY = 'sk-proj-Rt9Xb+T4mN7p/L2vR8sK1wY6hJ3cF5dG0aE';
let g: Wiring;
let u: RealtimeUpstreamDouble;

beforeAll(async () => {
  u = startRealtimeUpstream();
  g = await wire({ REALTIME_MAX_SESSIONS_PER_KEY: '0' });
  g.channels.push(channel(1, u, { apiKey: KEY }));
});
afterAll(async () => {
  await g.stop();
  await u.stop();
});

async function session() {
  const c = open('/v1/realtime?model=gpt-realtime', bearerOf((await g.addKey(50_000_000)).key), g);
  await c.opened;
  await c.waitFor('session.created');
  return { c, conn: u.connections.at(-1)!.id };
}

const noKey = (text: string) => {
  for (let i = 0; i + 10 <= KEY.length; i++) expect(text).not.toContain(KEY.slice(i, i + 10));
  const b64 = Buffer.from(KEY).toString('base64').slice(0, -4);
  for (let i = 0; i + 10 <= b64.length; i++) expect(text).not.toContain(b64.slice(i, i + 10));
};

describe('upstream text relayed over realtime carries no channel secret', () => {
  test('an upstream error event naming the key (plain, base64, in any field) is scrubbed; the session goes on', async () => {
    const { c, conn } = await session();
    // The handshake really carried the key, so the upstream knows it.
    expect(u.connections.at(-1)!.headers.authorization).toBe(`Bearer ${KEY}`);
    u.send(JSON.stringify({
      type: 'error', event_id: 'ev_1',
      error: { type: 'invalid_request_error', code: KEY, message: `Incorrect API key provided: ${KEY} (${Buffer.from(KEY).toString('base64')})`, param: null, event_id: null },
    }), conn);
    const ev = await c.waitFor('error');
    expect(ev.event_id).toBe('ev_1');
    expect(ev.error.type).toBe('invalid_request_error');
    expect(ev.error.message).toContain('Incorrect API key provided: [redacted]');
    noKey(JSON.stringify(c.events()));
    expect(c.close).toBeNull();
  });

  test('an upstream close reason naming the key is scrubbed in the close and in the error event before it', async () => {
    const { c } = await session();
    u.closeAll(4001, `invalid key ${KEY.slice(0, 40)}`);
    const close = await c.waitClose();
    expect(close.code).toBe(4001);
    expect(close.reason).toContain('[redacted]');
    noKey(close.reason);
    noKey(JSON.stringify(c.events()));
  });

  test('other frames still pass byte for byte (odd spacing and key order kept)', async () => {
    const { c, conn } = await session();
    const frame = '{ "delta" : "Hello",   "type":"response.output_text.delta" ,"n":1.50}';
    u.send(frame, conn);
    await c.waitFrames(c.frames.length + 1).catch(() => {});
    await Bun.sleep(20);
    expect(c.frames).toContain(frame);
  });
});

test("a failed response's upstream error code is stored scrubbed and short on the user's usage row", async () => {
  const { key, userId } = await g.addKey(50_000_000);
  const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key), g);
  await c.opened;
  await c.waitFor('session.created');
  const conn = u.connections.at(-1)!.id;
  const resp = { id: 'resp_failed', object: 'realtime.response', output: [], max_output_tokens: 'inf' };
  u.send(JSON.stringify({ type: 'response.created', event_id: 'ev_c', response: { ...resp, status: 'in_progress', usage: null } }), conn);
  u.send(JSON.stringify({ type: 'response.done', event_id: 'ev_d', response: { ...resp, status: 'failed', status_details: { type: 'failed', error: { type: 'x', code: `bad_key_${KEY}${'z'.repeat(100_000)}` } }, usage: { input_tokens: 5, output_tokens: 1 } } }), conn);
  await c.waitFor('response.done');
  c.ws.close();
  await Bun.sleep(20);
  const row = g.h.sqlite.query("select error_code from usage_logs where user_id = ? and kind = 'realtime'").get(userId) as any;
  expect(row.error_code.startsWith('bad_key_[redacted]')).toBe(true);
  expect(row.error_code.length).toBeLessThanOrEqual(64);
  noKey(row.error_code);
});
