/**
 * Attack: make the gateway clamp a realtime response's billed output to a max-output setting the upstream
 * never applied. The gateway bills output up to the response's max output tokens; a client that can make
 * the gateway believe in a smaller limit than the upstream's gets the rest for free. Over real sockets,
 * with the realtime upstream double (which, like an upstream that rejects or ignores a setting, does not
 * apply the client's session.update and announces `max_output_tokens: "inf"`).
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { SAMPLE_USAGE, startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';
import { RESPONSE_CREATE, SAMPLE_COST, bearerOf, channel, open, wire, type Wiring } from '../helpers/realtime-wiring';

let g: Wiring;
let u: RealtimeUpstreamDouble;

beforeAll(async () => {
  u = startRealtimeUpstream();
  g = await wire({ REALTIME_MAX_SESSIONS_PER_KEY: '0' });
  g.channels.push(channel(1, u));
});
afterAll(async () => {
  await g.stop();
  await u.stop();
});

const lastRow = (userId: number) => g.h.sqlite.query("select * from usage_logs where user_id = ? and kind = 'realtime' order by id desc limit 1").get(userId) as any;

/** Opens a session, sends `frames` then one response.create, and returns the billed usage row. */
async function billedAfter(frames: string[], create = RESPONSE_CREATE) {
  const { key, userId } = await g.addKey(50_000_000);
  const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key), g);
  await c.opened;
  await c.waitFor('session.created');
  for (const f of frames) c.ws.send(f);
  c.ws.send(create);
  await c.waitFor('response.done');
  c.ws.close();
  await Bun.sleep(20);
  g.quota.flush?.();
  return lastRow(userId);
}

const OUT = SAMPLE_USAGE.output_token_details;

describe('realtime output is billed up to the limit the upstream applied, not the one the client claimed', () => {
  test('baseline: a plain response is billed as reported', async () => {
    const row = await billedAfter([]);
    expect(row).toMatchObject({ output_tokens: OUT.text_tokens, audio_output_tokens: OUT.audio_tokens, cost: SAMPLE_COST, usage_flag: '' });
  });

  test('a session.update the upstream never confirmed (no session.updated) does not lower the billed output', async () => {
    const row = await billedAfter(['{"type":"session.update","session":{"type":"realtime","max_response_output_tokens":1}}']);
    expect(row.output_tokens + row.audio_output_tokens).toBe(OUT.text_tokens + OUT.audio_tokens);
    expect(row.cost).toBe(SAMPLE_COST);
  });

  test('a response.create naming two limits is billed up to the larger one ("inf" beside 1)', async () => {
    const row = await billedAfter([], '{"type":"response.create","response":{"max_output_tokens":1,"max_response_output_tokens":"inf"}}');
    expect(row.output_tokens + row.audio_output_tokens).toBe(OUT.text_tokens + OUT.audio_tokens);
    expect(row.cost).toBe(SAMPLE_COST);
  });

  test('a session lowered by a confirmed session.updated is clamped as before (the client asked for it)', async () => {
    const { key, userId } = await g.addKey(50_000_000);
    const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key), g);
    await c.opened;
    await c.waitFor('session.created');
    c.ws.send('{"type":"session.update","session":{"type":"realtime","max_output_tokens":10}}');
    // The upstream applies it and says so, and announces it for the response as its own limit.
    u.send(JSON.stringify({ type: 'session.updated', event_id: 'ev_su', session: { type: 'realtime', max_output_tokens: 10 } }), u.connections.at(-1)!.id);
    await c.waitFor('session.updated');
    u.sessionMaxOutput = 10;
    try {
      c.ws.send(RESPONSE_CREATE);
      await c.waitFor('response.done');
    } finally {
      u.sessionMaxOutput = 'inf';
    }
    c.ws.close();
    await Bun.sleep(20);
    const row = lastRow(userId);
    expect(row.output_tokens + row.audio_output_tokens).toBe(10);
    expect(row.usage_flag).toBe('implausible');
  });
});

describe('metered events hidden from a quick read are still metered', () => {
  test('a response.create whose type is written with a JSON escape is reserved and billed up to its own limit', async () => {
    const { key, userId } = await g.addKey(50_000_000);
    const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key), g);
    await c.opened;
    await c.waitFor('session.created');
    // A legitimate, confirmed low session limit...
    c.ws.send('{"type":"session.update","session":{"type":"realtime","max_output_tokens":10}}');
    u.send(JSON.stringify({ type: 'session.updated', event_id: 'ev_su2', session: { type: 'realtime', max_output_tokens: 10 } }), u.connections.at(-1)!.id);
    await c.waitFor('session.updated');
    // ...then a response that raises it for itself, hidden from a substring match by an escape.
    c.ws.send('{"type":"response\\u002ecreate","response":{"max_output_tokens":4096}}');
    await c.waitFor('response.done');
    c.ws.close();
    await Bun.sleep(20);
    const row = lastRow(userId);
    expect(row.output_tokens + row.audio_output_tokens).toBe(OUT.text_tokens + OUT.audio_tokens);
    expect(row.cost).toBe(SAMPLE_COST);
  });

  test('a response the upstream starts itself is reserved and billed up to the limit it announces for it', async () => {
    const { key, userId } = await g.addKey(50_000_000);
    const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key), g);
    await c.opened;
    await c.waitFor('session.created');
    const conn = u.connections.at(-1)!.id;
    c.ws.send('{"type":"session.update","session":{"type":"realtime","max_output_tokens":10}}');
    u.send(JSON.stringify({ type: 'session.updated', event_id: 'ev_su3', session: { type: 'realtime', max_output_tokens: 10 } }), conn);
    await c.waitFor('session.updated');
    // E.g. server VAD, or a response.create the gateway could not read: the upstream's own announcement rules.
    const resp = { id: 'resp_vad', object: 'realtime.response', output: [], max_output_tokens: 4096 };
    u.send(JSON.stringify({ type: 'response.created', event_id: 'ev_c', response: { ...resp, status: 'in_progress', usage: null } }), conn);
    u.send(JSON.stringify({ type: 'response.done', event_id: 'ev_d', response: { ...resp, status: 'completed', usage: SAMPLE_USAGE } }), conn);
    await c.waitFor('response.done');
    c.ws.close();
    await Bun.sleep(20);
    const row = lastRow(userId);
    expect(row.output_tokens + row.audio_output_tokens).toBe(OUT.text_tokens + OUT.audio_tokens);
    expect(row.cost).toBe(SAMPLE_COST);
  });

  test('a limit the gateway cannot read as a positive integer (4096.5) counts as "inf", not as absent', async () => {
    const { key, userId } = await g.addKey(50_000_000);
    const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key), g);
    await c.opened;
    await c.waitFor('session.created');
    c.ws.send('{"type":"session.update","session":{"type":"realtime","max_output_tokens":10}}');
    u.send(JSON.stringify({ type: 'session.updated', event_id: 'ev_su4', session: { type: 'realtime', max_output_tokens: 10 } }), u.connections.at(-1)!.id);
    await c.waitFor('session.updated');
    c.ws.send('{"type":"response.create","response":{"max_output_tokens":4096.5}}');
    await c.waitFor('response.done');
    c.ws.close();
    await Bun.sleep(20);
    const row = lastRow(userId);
    expect(row.output_tokens + row.audio_output_tokens).toBe(OUT.text_tokens + OUT.audio_tokens);
  });
});
