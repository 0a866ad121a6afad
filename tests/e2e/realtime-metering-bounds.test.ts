/**
 * Realtime cannot overrun a balance either: each response reserves what the session's context can cost
 * (context window at the dearest input price + max output tokens at the dearest output price), a
 * response.create the balance cannot cover is refused (error event, not forwarded), a charge never
 * exceeds its reservation, and a session ends (1008) once the balance is spent. Over real sockets.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { costOf } from '@gw/core';
import { startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';
import { PRICE, RESERVE, RESPONSE_CREATE, bearerOf, channel, open, wire, type Wiring } from '../helpers/realtime-wiring';

let g: Wiring;
let u: RealtimeUpstreamDouble;
const HUGE = 2_000_000;

beforeAll(async () => {
  u = startRealtimeUpstream();
  g = await wire({ REALTIME_MAX_SESSIONS_PER_KEY: '0' });
  g.channels.push(channel(1, u));
});
afterAll(async () => {
  await g.stop();
  await u.stop();
});

const rows = (userId: number) => g.h.sqlite.query("select * from usage_logs where user_id = ? and kind = 'realtime'").all(userId) as any[];
const lowestBalanceAfter = (userId: number) => (g.h.sqlite.query('select min(balance_after) as m from ledger where user_id = ?').get(userId) as any).m as number;

describe('realtime reservations bound every charge', () => {
  test('50 parallel sessions, each response reporting 2M tokens: 5 reservations fit, 45 refused, balance exactly spent and never below 0', async () => {
    u.usageFor = () => ({
      total_tokens: 2 * HUGE, input_tokens: HUGE, output_tokens: HUGE,
      input_token_details: { text_tokens: 0, audio_tokens: HUGE, image_tokens: 0, cached_tokens: 0 },
      output_token_details: { text_tokens: 0, audio_tokens: HUGE },
    }) as any;
    try {
      const { key, userId } = await g.addKey(5 * RESERVE);
      const cs = Array.from({ length: 50 }, () => open('/v1/realtime?model=gpt-realtime', bearerOf(key), g));
      await Promise.all(cs.map((c) => c.opened));
      await Promise.all(cs.map((c) => c.waitFor('session.created')));
      const before = u.received.filter((f) => String(f.data).includes('response.create')).length;
      for (const c of cs) c.ws.send(RESPONSE_CREATE);
      // Each client sees either its response (then a close: the balance is spent) or a refusal.
      await Promise.all(cs.map((c) => Promise.race([c.waitFor('response.done', 1, 5000), c.waitFor('error', 1, 5000)])));
      const served = cs.filter((c) => c.events().some((e) => e.type === 'response.done'));
      const refused = cs.filter((c) => c.events().some((e) => e.type === 'error' && e.error.code === 'quota_exhausted') && !served.includes(c));
      expect(served.length).toBe(5);
      expect(refused.length).toBe(45);
      // Refused response.creates never reached the upstream.
      expect(u.received.filter((f) => String(f.data).includes('response.create')).length - before).toBe(5);
      // Served sessions end once the balance is spent; refused ones stay open.
      for (const c of served) expect((await c.waitClose()).code).toBe(1008);
      for (const c of refused) expect(c.close).toBeNull();
      const billed = rows(userId);
      expect(billed.length).toBe(5);
      for (const r of billed) {
        // Clamped to the context window (32,000) and the default max output (4,096): exactly the reservation.
        expect(r).toMatchObject({ audio_input_tokens: 32_000, audio_output_tokens: 4096, cost: RESERVE, usage_flag: 'implausible' });
      }
      expect(g.quota.balance(userId)).toBe(0);
      expect(lowestBalanceAfter(userId)).toBeGreaterThanOrEqual(0);
      expect(await g.ledger.sum(userId)).toBe(0);
      for (const c of cs) if (c.ws.readyState <= 1) c.ws.close();
    } finally {
      u.usageFor = () => ({ total_tokens: 0, input_tokens: 1, output_tokens: 1 }) as any;
    }
  });

  test('a response.done whose usage leaves a total out, or gives an unusable output, bills what was delivered: never 0, never max output', async () => {
    const { key, userId } = await g.addKey(10 * RESERVE);
    const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key), g);
    await c.opened;
    await c.waitFor('session.created');
    const queue: any[] = [{}, { input_tokens: 40 }, { input_tokens: 40, output_tokens: -1 }, { input_tokens: 40, output_tokens: 0, output_token_details: {} }];
    const n = queue.length;
    u.usageFor = () => queue.shift();
    try {
      for (let i = 0; i < n; i++) {
        c.ws.send(RESPONSE_CREATE);
        await c.waitFor('response.done', i + 1);
      }
      await Bun.sleep(50);
      const billed = rows(userId);
      expect(billed.length).toBe(n);
      const delivered = billed[0].output_tokens;
      expect(delivered).toBeGreaterThan(0);
      expect(delivered).toBeLessThan(4096);
      expect(billed.map((r) => [r.output_tokens, r.usage_flag])).toEqual([[delivered, 'estimated'], [delivered, 'estimated'], [delivered, 'invalid'], [0, '']]);
      expect(billed.slice(1).map((r) => r.input_tokens)).toEqual([40, 40, 40]);
      expect(await g.ledger.sum(userId)).toBe(g.quota.balance(userId));
    } finally {
      c.ws.close();
      u.usageFor = () => ({ total_tokens: 0, input_tokens: 1, output_tokens: 1 }) as any;
    }
  });

  test('hostile usage in response.done (fractions, negatives, strings, null, 1e400) is billed, flagged, bounded', async () => {
    const { key, userId } = await g.addKey(10 * RESERVE);
    const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key), g);
    await c.opened;
    await c.waitFor('session.created');
    const conn = u.connections.at(-1)!.id;
    const HOSTILE = ['1.5', '-5', '"7"', 'null', '9007199254740993', '{}'];
    const queue = HOSTILE.map((bad) => ({ input_tokens: 40, output_tokens: JSON.parse(bad) }));
    u.usageFor = () => queue.shift() as any;
    for (let i = 0; i < HOSTILE.length; i++) {
      c.ws.send(RESPONSE_CREATE);
      await c.waitFor('response.done', i + 1);
    }
    // And a response.done the gateway never saw created (no reservation): raw, so 1e400 arrives as written.
    u.send(`{"type":"response.done","event_id":"e_raw","response":{"id":"resp_raw","status":"completed","usage":{"input_tokens":1e400,"output_tokens":-3}}}`, conn);
    await c.waitFor('response.done', HOSTILE.length + 1);
    const billed = rows(userId);
    expect(billed.length).toBe(HOSTILE.length + 1);
    for (const r of billed) {
      for (const k of ['input_tokens', 'output_tokens', 'audio_input_tokens', 'audio_output_tokens', 'cache_read_tokens', 'cost']) {
        expect(Number.isSafeInteger(r[k]) && r[k] >= 0).toBe(true);
      }
      expect(r.cost).toBeLessThanOrEqual(RESERVE);
      expect(r.cost).toBeGreaterThan(0);
      expect(r.usage_flag).toBe('invalid');
    }
    expect(g.quota.balance(userId)).toBeGreaterThanOrEqual(0);
    expect(await g.ledger.sum(userId)).toBe(g.quota.balance(userId));
    c.ws.close();
    u.usageFor = () => ({ total_tokens: 0, input_tokens: 1, output_tokens: 1 }) as any;
  });
  test('an unusable audio input count is billed at the input total (else the context window), an unusable cached count at what its breakdown took out; flagged invalid, never as 0', async () => {
    const { key, userId } = await g.addKey(20 * RESERVE);
    const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key), g);
    await c.opened;
    await c.waitFor('session.created');
    const conn = u.connections.at(-1)!.id;
    const HOSTILE = ['-5', '1.5', '"7"', '1e308', '9007199254740993'];
    const out = { text_tokens: 2, audio_tokens: 0 };
    const queue: any[] = [
      // Audio input unusable beside a usable total: billed at the total (100), on top of the 10 text tokens.
      ...HOSTILE.map((bad) => ({ input_tokens: 100, output_tokens: 2, input_token_details: { text_tokens: 10, audio_tokens: JSON.parse(bad), cached_tokens: 0 }, output_token_details: out })),
      // The cached count unusable while its breakdown took 100 tokens out of the text count: billed at the total, not 0.
      { input_tokens: 100, output_tokens: 2, input_token_details: { text_tokens: 100, audio_tokens: 0, cached_tokens: -1, cached_tokens_details: { text_tokens: 100 } }, output_token_details: out },
      // The cached count unusable without a breakdown: nothing was taken out of the text count, which bills it all.
      { input_tokens: 100, output_tokens: 2, input_token_details: { text_tokens: 100, audio_tokens: 0, cached_tokens: '7' }, output_token_details: out },
      // More cached than the whole input (with or without a breakdown): unusable, the input bills at the text price.
      { input_tokens: 100, output_tokens: 2, input_token_details: { text_tokens: 100, audio_tokens: 0, cached_tokens: 500 }, output_token_details: out },
      { input_tokens: 100, output_tokens: 2, input_token_details: { text_tokens: 100, audio_tokens: 0, cached_tokens: 500, cached_tokens_details: { text_tokens: 500 } }, output_token_details: out },
      // The total unusable too: the context window (32,000, what the hold was sized on), less the 10 text tokens.
      { input_tokens: 'x', output_tokens: 2, input_token_details: { text_tokens: 10, audio_tokens: -1, cached_tokens: 0 }, output_token_details: out },
      // A valid count bills as before.
      { input_tokens: 100, output_tokens: 2, input_token_details: { text_tokens: 10, audio_tokens: 90, cached_tokens: 0 }, output_token_details: out },
    ];
    const n = queue.length;
    u.usageFor = () => queue.shift();
    try {
      for (let i = 0; i < n; i++) {
        c.ws.send(RESPONSE_CREATE);
        await c.waitFor('response.done', i + 1);
      }
      // And raw, so 1e400 arrives as written.
      u.send(`{"type":"response.done","event_id":"e_raw_a","response":{"id":"resp_raw_a","status":"completed","usage":{"input_tokens":100,"output_tokens":2,"input_token_details":{"text_tokens":10,"audio_tokens":1e400,"cached_tokens":0},"output_token_details":{"text_tokens":2,"audio_tokens":0}}}}`, conn);
      await c.waitFor('response.done', n + 1);
      await Bun.sleep(50);
      const billed = rows(userId);
      expect(billed.length).toBe(n + 1);
      const view = billed.map((r) => [r.input_tokens, r.audio_input_tokens, r.cache_read_tokens, r.usage_flag]);
      expect(view).toEqual([
        ...HOSTILE.map(() => [10, 100, 0, 'invalid']),
        [0, 0, 100, 'invalid'],
        [100, 0, 0, 'invalid'],
        [100, 0, 0, 'invalid'],
        [100, 0, 0, 'invalid'],
        [10, 31_990, 0, 'invalid,implausible'],
        [10, 90, 0, ''],
        [10, 100, 0, 'invalid'],
      ]);
      for (const r of billed) expect(r.cost).toBeGreaterThan(0);
      expect(await g.ledger.sum(userId)).toBe(g.quota.balance(userId));
    } finally {
      c.ws.close();
      u.usageFor = () => ({ total_tokens: 0, input_tokens: 1, output_tokens: 1 }) as any;
    }
  });

  test('an unusable audio output count is billed at the rest of the output total, an unsplit total by what was delivered and held: never as 0, never all at the text price', async () => {
    const { key, userId } = await g.addKey(20 * RESERVE);
    const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key), g);
    await c.opened;
    await c.waitFor('session.created');
    const conn = u.connections.at(-1)!.id;
    // One second of PCM16 at 24 kHz appended (the conversation can hold that much audio input), one delivered per response.
    const append = JSON.stringify({ type: 'input_audio_buffer.append', audio: Buffer.alloc(48_000).toString('base64') });
    c.ws.send(append);
    const heldAudio = Math.ceil((Math.floor((append.length * 3) / 4) / 48_000) * 20);
    const second = Buffer.alloc(48_000).toString('base64'); // 20 audio output tokens (OpenAI's one per 50 ms)
    const respond = (id: string, usage: unknown, audio = true) => {
      u.send(JSON.stringify({ type: 'response.created', response: { id, status: 'in_progress', max_output_tokens: 'inf' } }), conn);
      if (audio) u.send(JSON.stringify({ type: 'response.output_audio.delta', response_id: id, item_id: 'i', output_index: 0, content_index: 0, delta: second }), conn);
      u.send(JSON.stringify({ type: 'response.done', response: { id, status: 'completed', usage } }), conn);
    };
    await u.until(() => u.received.some((r) => r.conn === conn && String(r.data).includes('input_audio_buffer.append')));
    // No input breakdown, nothing delivered: the audio the conversation can hold bills as audio, the rest as text.
    respond('resp_in', { input_tokens: 500, output_tokens: 5 }, false);
    const bad = ['-5', '1.5', '"7"', '1e308', '9007199254740993'];
    for (const [i, b] of bad.entries()) respond(`resp_a${i}`, { input_tokens: 10, output_tokens: 105, input_token_details: { text_tokens: 10, audio_tokens: 0 }, output_token_details: { text_tokens: 5, audio_tokens: JSON.parse(b) } });
    // No output breakdown: the audio delivered (20 tokens) is audio, the rest of the total text.
    respond('resp_ns', { input_tokens: 10, output_tokens: 105, input_token_details: { text_tokens: 10, audio_tokens: 0 } });
    // A breakdown naming text output only, while audio was delivered: the rest of the total is the audio.
    respond('resp_nx', { input_tokens: 10, output_tokens: 105, input_token_details: { text_tokens: 10, audio_tokens: 0 }, output_token_details: { text_tokens: 5 } });
    // The total unusable too: what was delivered of each kind.
    respond('resp_nt', { input_tokens: 10, output_tokens: -1, input_token_details: { text_tokens: 10, audio_tokens: 0 }, output_token_details: { text_tokens: 5, audio_tokens: -1 } });
    await c.waitFor('response.done', bad.length + 4);
    await Bun.sleep(50);
    const view = rows(userId).map((r) => [r.input_tokens, r.audio_input_tokens, r.output_tokens, r.audio_output_tokens, r.cost, r.usage_flag]);
    const cost = (ti: number, ai: number, to: number, ao: number) => costOf([[ti, PRICE.input], [ai, PRICE.audio_input], [to, PRICE.output], [ao, PRICE.audio_output]]);
    expect(view).toEqual([
      [500 - heldAudio, heldAudio, 5, 0, cost(500 - heldAudio, heldAudio, 5, 0), 'estimated'],
      ...bad.map(() => [10, 0, 5, 100, cost(10, 0, 5, 100), 'invalid']),
      [10, 0, 85, 20, cost(10, 0, 85, 20), 'estimated'],
      [10, 0, 5, 100, cost(10, 0, 5, 100), 'estimated'],
      [10, 0, 5, 20, cost(10, 0, 5, 20), 'invalid'],
    ]);
    expect(await g.ledger.sum(userId)).toBe(g.quota.balance(userId));
    c.ws.close();
  });

  test('a response.done without usage, or without an input total, bills its input on the conversation bound, audio at the audio price', async () => {
    const { key, userId } = await g.addKey(20 * RESERVE);
    const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key), g);
    await c.opened;
    await c.waitFor('session.created');
    const conn = u.connections.at(-1)!.id;
    const append = JSON.stringify({ type: 'input_audio_buffer.append', audio: Buffer.alloc(96_000).toString('base64') });
    c.ws.send(append);
    const heldAudio = Math.ceil((Math.floor((append.length * 3) / 4) / 48_000) * 20);
    await u.until(() => u.received.some((r) => r.conn === conn && String(r.data).includes('input_audio_buffer.append')));
    const done = (id: string, usage: unknown) => {
      u.send(JSON.stringify({ type: 'response.created', response: { id, status: 'in_progress', max_output_tokens: 100 } }), conn);
      u.send(JSON.stringify({ type: 'response.done', response: { id, status: 'completed', ...(usage === undefined ? {} : { usage }) } }), conn);
    };
    done('resp_none', undefined);
    done('resp_null', null);
    done('resp_noin', { output_tokens: 0, output_token_details: { text_tokens: 0, audio_tokens: 0 } });
    await c.waitFor('response.done', 3);
    await Bun.sleep(50);
    const billed = rows(userId);
    expect(billed).toHaveLength(3);
    for (const r of billed) {
      // Before: the whole context window (32,000) at the text price, the audio billed as none.
      expect(r.audio_input_tokens).toBe(heldAudio);
      expect(r.input_tokens).toBeGreaterThan(1024);
      expect(r.input_tokens).toBeLessThan(PRICE.context_window / 4);
      expect(r.usage_flag).toBe('estimated');
    }
    expect(await g.ledger.sum(userId)).toBe(g.quota.balance(userId));
    c.ws.close();
  });
});
