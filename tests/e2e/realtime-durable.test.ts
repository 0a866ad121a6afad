/**
 * /v1/realtime metering when the quota answers later, as in PostgreSQL mode: settlements through a
 * durable sink (group commit) and reservations that resolve asynchronously (holds across nodes). Over
 * real sockets; the sink writes the real SQLite tables behind a gate the test opens, so "not before the
 * commit" can be observed (the PostgreSQL committer itself runs under `bun run test:pg` and in
 * libs/db/src/pg/group-commit.test.ts).
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'bun:test';
import { SettlementsRepo } from '@gw/db';
import { GatedSink } from '../helpers/gated-sink';
import type { QuotaService } from '@gw/billing';
import { RealtimeTestClient, SAMPLE_USAGE, startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';
import { PRICE, RESERVE, RESPONSE_CREATE, SAMPLE_COST, bearerOf, channel, wire, type Wiring } from '../helpers/realtime-wiring';

let up: RealtimeUpstreamDouble;
let w: Wiring;
let sink: GatedSink;
/** Every reservation answers after this long (a Redis round trip, made long enough to order frames behind it). */
let reserveDelayMs = 0;
const clients: RealtimeTestClient[] = [];

beforeAll(async () => {
  up = startRealtimeUpstream();
  w = await wire({}, {
    durable: (h) => (sink = new GatedSink(new SettlementsRepo(h.sqlite))),
    port: (q: QuotaService) => ({
      reserve: async (input) => { await Bun.sleep(reserveDelayMs); return q.reserve(input); },
      affords: async (input) => { await Bun.sleep(reserveDelayMs); return q.affords(input as any); },
      available: (id) => q.available(id),
      settleNow: (r, log) => q.settleNow(r, log as any),
      release: (r) => q.release(r),
    }),
  });
  w.channels.push(channel(1, up));
});
afterAll(async () => {
  sink.release();
  await w.stop();
  await up.stop();
});
afterEach(() => {
  for (const c of clients.splice(0)) if (c.ws.readyState <= 1) c.ws.close();
  sink.release();
  reserveDelayMs = 0;
  up.echo = true;
});

const open = (key: string) => {
  const c = new RealtimeTestClient(`${w.ws}/v1/realtime?model=gpt-realtime`, bearerOf(key));
  clients.push(c);
  return c;
};
const usageRows = (userId: number) => w.h.sqlite.query('select cost, request_id from usage_logs where user_id = ?').all(userId) as any[];
const sessionRow = (userId: number) => w.h.sqlite.query('select responses, cost, close_code from realtime_sessions where user_id = ?').get(userId) as any;
const types = (c: RealtimeTestClient) => c.events().map((e) => e.type);

async function until(cond: () => boolean, ms = 3000) {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await Bun.sleep(5);
  expect(cond()).toBe(true);
}

describe('settlement by commit', () => {
  test('response.done reaches the client only after its commit; the balance and the session record follow the commit', async () => {
    const { key, userId } = await w.addKey(5_000_000);
    const c = open(key);
    await c.opened;
    sink.close();
    c.ws.send(RESPONSE_CREATE);
    await until(() => sink.waiting === 1);
    await c.waitFor('response.output_text.done');
    await Bun.sleep(50);
    // Everything before response.done went out; response.done waits for the commit, and so would any frame after it.
    expect(types(c)).not.toContain('response.done');
    expect(usageRows(userId)).toEqual([]);
    sink.release();
    const done = await c.waitFor('response.done');
    expect(done.response.status).toBe('completed');
    // The client saw the end of the response: its charge is committed.
    expect(usageRows(userId).map((r) => r.cost)).toEqual([SAMPLE_COST]);
    expect(w.quota.available(userId)).toBe(5_000_000 - SAMPLE_COST);
    c.ws.send(RESPONSE_CREATE);
    await c.waitFor('response.done', 2);
    c.ws.close(1000, 'bye');
    await c.waitClose();
    await until(() => !!sessionRow(userId));
    expect(sessionRow(userId)).toEqual({ responses: 2, cost: 2 * SAMPLE_COST, close_code: 1000 });
  });

  test('a client that leaves while a commit waits: the session record is written after the commit, with its cost', async () => {
    const { key, userId } = await w.addKey(5_000_000);
    const c = open(key);
    await c.opened;
    sink.close();
    c.ws.send(RESPONSE_CREATE);
    await until(() => sink.waiting === 1);
    c.ws.close(1000, 'gone');
    await c.waitClose();
    await Bun.sleep(100);
    expect(sessionRow(userId)).toBeNull();
    sink.release();
    await until(() => !!sessionRow(userId));
    expect(sessionRow(userId)).toEqual({ responses: 1, cost: SAMPLE_COST, close_code: 1000 });
    expect(usageRows(userId).map((r) => r.cost)).toEqual([SAMPLE_COST]);
  });

  test('the upstream closing right after response.done: the client gets response.done, then the close', async () => {
    const { key, userId } = await w.addKey(5_000_000);
    const c = open(key);
    await c.opened;
    sink.close();
    c.ws.send(RESPONSE_CREATE);
    await until(() => sink.waiting === 1);
    up.closeAll(1000, 'finished');
    await Bun.sleep(50);
    expect(c.close).toBeNull();
    sink.release();
    const closed = await c.waitClose();
    expect(closed.code).toBe(1000);
    expect(types(c).at(-1)).toBe('response.done');
    expect(usageRows(userId).map((r) => r.cost)).toEqual([SAMPLE_COST]);
  });

  test('a failed commit ends the session (1011) after the response; nothing is charged', async () => {
    const { key, userId } = await w.addKey(5_000_000);
    const c = open(key);
    await c.opened;
    sink.failNext = true;
    c.ws.send(RESPONSE_CREATE);
    const closed = await c.waitClose();
    expect(closed.code).toBe(1011);
    const t = types(c);
    expect(t.slice(-2)).toEqual(['response.done', 'error']);
    expect(c.events().at(-1).error.code).toBe('internal_error');
    expect(usageRows(userId)).toEqual([]);
    expect(w.quota.available(userId)).toBe(5_000_000);
    await until(() => !!sessionRow(userId));
    expect(sessionRow(userId)).toEqual({ responses: 0, cost: 0, close_code: 1011 });
    expect(w.logs.join('\n')).toContain('realtime.settlement_failed');
  });

  test('a commit that spends the balance ends the session (1008) once committed, after its response.done', async () => {
    // Exactly one response's hold, and a response using all of it (the whole context window of audio in, the
    // default max output of audio out): the charge takes the balance to zero.
    const { key, userId } = await w.addKey(RESERVE);
    up.usageFor = () => ({
      total_tokens: 32_000 + 4096, input_tokens: 32_000, output_tokens: 4096,
      input_token_details: { text_tokens: 0, audio_tokens: 32_000, image_tokens: 0, cached_tokens: 0, cached_tokens_details: { text_tokens: 0, audio_tokens: 0, image_tokens: 0 } },
      output_token_details: { text_tokens: 0, audio_tokens: 4096 },
    });
    try {
      const c = open(key);
      await c.opened;
      sink.close();
      c.ws.send(RESPONSE_CREATE);
      await until(() => sink.waiting === 1);
      await Bun.sleep(30);
      expect(c.close).toBeNull();
      sink.release();
      const closed = await c.waitClose();
      expect(closed.code).toBe(1008);
      expect(types(c).slice(-2)).toEqual(['response.done', 'error']);
      expect(c.events().at(-1).error.code).toBe('quota_exhausted');
      expect(usageRows(userId).map((r) => r.cost)).toEqual([RESERVE]);
      expect(w.quota.available(userId)).toBe(0);
    } finally {
      up.usageFor = () => SAMPLE_USAGE;
    }
  });
});

describe('reservations that answer later', () => {
  test('a response.create the quota refuses is never forwarded, and the client frames after it keep their order', async () => {
    // Exactly one default response's hold: admitted, but a response asking for more output is refused.
    const { key, userId } = await w.addKey(RESERVE);
    const c = open(key);
    await c.opened;
    await c.waitFor('session.created');
    reserveDelayMs = 40;
    const seen = up.received.length;
    c.ws.send('{"type":"response.create","response":{"max_output_tokens":8192}}');
    c.ws.send('{"type":"conversation.item.create","n":1}');
    c.ws.send('{"type":"conversation.item.create","n":2}');
    await c.waitFor('conversation.item.create', 2);
    const after = c.events().filter((e) => e.type === 'error' || e.type === 'conversation.item.create');
    expect(after.map((e) => e.type === 'error' ? e.error.code : `item ${e.n}`)).toEqual(['quota_exhausted', 'item 1', 'item 2']);
    // The upstream saw the two items, in order, and never the refused response.
    expect(up.received.slice(seen).map((f) => JSON.parse(String(f.data)).type)).toEqual(['conversation.item.create', 'conversation.item.create']);
    // A response within the balance is held (later), relayed and billed.
    c.ws.send(RESPONSE_CREATE);
    await c.waitFor('response.done');
    expect(usageRows(userId).map((r) => r.cost)).toEqual([SAMPLE_COST]);
  });

  test('admission awaits its trial hold: a key that cannot cover one response gets 402 before the upgrade; nothing stays counted', async () => {
    reserveDelayMs = 20;
    const { key } = await w.addKey(RESERVE - 1);
    const res = await fetch(`${w.url}/v1/realtime?model=gpt-realtime`, {
      headers: { authorization: `Bearer ${key}`, connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' },
    });
    expect(res.status).toBe(402);
    expect(((await res.json()) as any).error.code).toBe('quota_exhausted');
    expect(w.service.liveCount).toBe(0);
    expect(w.slots.inUse).toBe(0);
  });

  test('a response the upstream starts itself whose hold is refused later ends the session (1008); both, started, are billed on their estimates', async () => {
    const { key, userId } = await w.addKey(RESERVE);
    const c = open(key);
    await c.opened;
    await c.waitFor('session.created');
    reserveDelayMs = 20;
    const conn = up.connections.at(-1)!.id;
    // Server VAD: two responses the client never asked for; the balance covers one hold.
    up.send(JSON.stringify({ type: 'response.created', response: { id: 'resp_vad1', status: 'in_progress' } }), conn);
    up.send(JSON.stringify({ type: 'response.created', response: { id: 'resp_vad2', status: 'in_progress' } }), conn);
    const closed = await c.waitClose();
    expect(closed.code).toBe(1008);
    expect(c.events().filter((e) => e.type === 'response.created').length).toBe(2);
    expect(c.events().at(-1).error.code).toBe('quota_exhausted');
    // resp_vad1 started (response.created) and never ended: billed on what it delivered (no output; input bounded by
    // what the conversation held: the upstream's session and 1,024 tokens of formatting; resp_vad2 started after it,
    // so none of its output), once, whichever of its hold and its settlement is decided first; nothing stays held.
    // resp_vad2's hold was refused, yet the upstream ran it: billed alike, unreserved (tests/e2e/realtime-unanswered.test.ts),
    // reading resp_vad1's max output at the dearer (audio) input price; capped by what is left when it settles first.
    await until(() => (w.h.sqlite.query('select count(*) as n from usage_logs where user_id = ?').get(userId) as any).n === 2);
    const rows = w.h.sqlite.query('select request_id, input_tokens, audio_input_tokens, output_tokens, usage_flag, error_code from usage_logs where user_id = ? order by request_id').all(userId) as any[];
    const input = 1024 + Buffer.byteLength(c.frames.find((f) => String(f).includes('"session.created"')) as string);
    expect(rows).toEqual([
      { request_id: expect.stringMatching(/_resp_vad1$/), input_tokens: input, audio_input_tokens: 0, output_tokens: 0, usage_flag: 'estimated', error_code: 'quota_exhausted' },
      { request_id: expect.stringMatching(/_resp_vad2$/), input_tokens: input, audio_input_tokens: 4096, output_tokens: 0, usage_flag: expect.stringMatching(/^estimated(,capped)?$/), error_code: 'quota_exhausted' },
    ]);
    await until(() => w.quota.available(userId) === w.quota.balance(userId) && w.quota.balance(userId) < RESERVE);
  });
});
