/** /v1/realtime metering over real sockets: exact billing per response, quota exhaustion, reservation edge cases. */
import { describe, expect, test } from 'bun:test';
import { SAMPLE_USAGE } from '../doubles/realtime-upstream';
import { costOf } from '@gw/core';
import { PRICE, RESERVE, RESPONSE_CREATE, SAMPLE_COST, bearerOf, clients, expectError, open, realtimeSuite, refused, respondOnce, up, w } from '../helpers/realtime-wiring';

realtimeSuite();

describe('realtime metering', () => {
  test('every response.done is billed exactly: usage × prices = charge = usage log rows; session record written', async () => {
    const { key, userId } = await w.addKey(5_000_000);
    const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key));
    await c.opened;
    for (let i = 1; i <= 3; i++) {
      c.ws.send(RESPONSE_CREATE);
      const done = await c.waitFor('response.done', i);
      expect(done.response.usage).toEqual(SAMPLE_USAGE);
    }
    const deltas = c.events().filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
    expect(deltas).toBe('Hello from the double'.repeat(3));
    c.ws.close(1000, 'finished');
    await c.waitClose();
    const rows = w.h.sqlite.query('select * from usage_logs where user_id = ? order by id').all(userId) as any[];
    expect(rows.length).toBe(3);
    for (const r of rows) {
      expect(r.kind).toBe('realtime');
      expect(r.request_id).toMatch(/^rt_[A-Za-z0-9]+_resp_\d+$/);
      expect([r.input_tokens, r.audio_input_tokens, r.cache_read_tokens, r.output_tokens, r.audio_output_tokens]).toEqual([16, 128, 256, 30, 82]);
      expect(r.cost).toBe(SAMPLE_COST);
      expect(r.channel_id).toBe(1);
      expect(r.upstream_model).toBe('gpt-realtime-2025');
    }
    expect(w.quota.balance(userId)).toBe(5_000_000 - 3 * SAMPLE_COST);
    expect(await w.ledger.sum(userId)).toBe(5_000_000 - 3 * SAMPLE_COST);
    const charges = w.h.sqlite.query("select amount from ledger where user_id = ? and kind = 'charge'").all(userId) as any[];
    expect(charges.map((x) => x.amount)).toEqual([-SAMPLE_COST, -SAMPLE_COST, -SAMPLE_COST]);
    // The record is written when the session ends (the close handler may run just after the client sees the close).
    await up.until(() => !!w.h.sqlite.query('select 1 from realtime_sessions where user_id = ?').get(userId));
    const s = w.h.sqlite.query('select * from realtime_sessions where user_id = ?').get(userId) as any;
    expect(s.responses).toBe(3);
    expect(s.cost).toBe(3 * SAMPLE_COST);
    expect(s.frames_in).toBe(3);
    expect(s.bytes_in).toBe(3 * RESPONSE_CREATE.length);
    expect(s.frames_out).toBe(c.frames.length);
    expect(s.bytes_out).toBe(c.frames.reduce((n, f) => n + Buffer.byteLength(f as string), 0));
    expect([s.close_code, s.close_reason, s.channel_id, s.model]).toEqual([1000, 'finished', 1, 'gpt-realtime']);
    expect(s.duration_ms).toBeGreaterThanOrEqual(0);
    expect(s.session_id).toBe(rows[0].request_id.replace(/_resp_\d+$/, ''));
  });

  test('the group price ratio multiplies each response inside its single rounding, and is logged', async () => {
    w.ratios.set('default', 1500);
    try {
      const userId = await respondOnce();
      const row = w.h.sqlite.query('select cost, "group", price_ratio from usage_logs where user_id = ?').get(userId) as any;
      const exact = costOf([[80 - 64, PRICE.input], [320 - 192, PRICE.audio_input], [256, PRICE.cache_read], [30, PRICE.output], [82, PRICE.audio_output]], 1500);
      expect(row).toEqual({ cost: exact, group: 'default', price_ratio: 1500 });
      expect(w.quota.balance(userId)).toBe(5_000_000 - exact);
    } finally {
      w.ratios.delete('default');
    }
  });

  test('a model priced without audio prices bills audio at the text prices, never 0', async () => {
    await w.book.upsert({ ...PRICE, audio_input: 0, audio_output: 0 });
    try {
      const userId = await respondOnce();
      const row = w.h.sqlite.query('select cost, audio_input_tokens, audio_output_tokens from usage_logs where user_id = ?').get(userId) as any;
      // Before: the 128 audio input and 82 audio output tokens were free.
      const exact = costOf([[80 - 64, PRICE.input], [320 - 192, PRICE.input], [256, PRICE.cache_read], [30, PRICE.output], [82, PRICE.output]]);
      expect(row).toEqual({ cost: exact, audio_input_tokens: 128, audio_output_tokens: 82 });
    } finally {
      await w.book.upsert(PRICE);
    }
  });

  test('quota runs short mid-session: the next response.create is refused with an error event, not forwarded; the session stays open', async () => {
    // Enough for the admission check and one response's reservation, not for a second one after the charge.
    const { key, userId } = await w.addKey(RESERVE + SAMPLE_COST - 1);
    const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key));
    await c.opened;
    c.ws.send(RESPONSE_CREATE);
    await c.waitFor('response.done');
    const before = up.received.length;
    c.ws.send(RESPONSE_CREATE);
    const err = await c.waitFor('error');
    expect(err.error.code).toBe('quota_exhausted');
    expect(up.received.length).toBe(before); // the refused response.create never reached the upstream
    expect(c.close).toBeNull();
    // A cheaper response (small max output) still fits and is served on the same session.
    const cheap = JSON.stringify({ type: 'response.create', response: { max_output_tokens: 200 } });
    c.ws.send(cheap);
    await c.waitFor('response.done', 2);
    expect(w.quota.balance(userId)).toBe(RESERVE - 1 - SAMPLE_COST);
    expect(w.h.sqlite.query('select count(*) as n from usage_logs where user_id = ?').get(userId)).toEqual({ n: 2 });
    expect(await w.ledger.sum(userId)).toBe(w.quota.balance(userId));
  });
});

describe('realtime session edge cases', () => {
  test('server-started responses (server VAD, no client response.create) are reserved and billed too', async () => {
    const { key, userId } = await w.addKey(5_000_000);
    const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key));
    await c.opened;
    await c.waitFor('session.created');
    const conn = up.connections.at(-1)!.id;
    up.send('{"type":"response.created","event_id":"e1","response":{"id":"resp_vad","object":"realtime.response","status":"in_progress","output":[],"usage":null}}', conn);
    up.send(JSON.stringify({ type: 'response.done', event_id: 'e2', response: { id: 'resp_vad', object: 'realtime.response', status: 'completed', output: [], usage: SAMPLE_USAGE } }), conn);
    await c.waitFor('response.done');
    await up.until(() => !!w.h.sqlite.query('select 1 from usage_logs where user_id = ?').get(userId));
    const row = w.h.sqlite.query('select request_id, cost from usage_logs where user_id = ?').get(userId) as any;
    expect(row.cost).toBe(SAMPLE_COST);
    expect(row.request_id).toEndWith('_resp_vad');
    expect(w.quota.available(userId)).toBe(5_000_000 - SAMPLE_COST); // nothing left reserved
  });

  test('a response.create the upstream refuses (error event) gives its reservation back', async () => {
    const { key, userId } = await w.addKey(RESERVE + SAMPLE_COST); // room for one reservation at a time
    const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key));
    await c.opened;
    up.refuseResponses = 1;
    c.ws.send(RESPONSE_CREATE);
    await c.waitFor('error');
    c.ws.send(RESPONSE_CREATE);
    await c.waitFor('response.done');
    expect(c.close).toBeNull();
    expect(w.quota.available(userId)).toBe(RESERVE);
  });

  test('a key revoked mid-session: the next response is refused (error event, close 1008)', async () => {
    const { key } = await w.addKey(5_000_000);
    const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key));
    await c.opened;
    await c.waitFor('session.created');
    w.keys.delete(key);
    c.ws.send(RESPONSE_CREATE);
    expect((await c.waitClose()).code).toBe(1008);
    expect(c.events().at(-1).error.code).toBe('api_key_revoked');
  });

  test('usage that cannot be written ends the session (1011) instead of serving unbilled responses', async () => {
    const { key, userId } = await w.addKey(5_000_000);
    const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key));
    await c.opened;
    await c.waitFor('session.created');
    w.h.sqlite.query('delete from users where id = ?').run(userId); // the charge's ledger write now fails
    c.ws.send(RESPONSE_CREATE);
    expect((await c.waitClose()).code).toBe(1011);
    expect(c.events().at(-1).error.code).toBe('internal_error');
    expect(w.logs.some((l) => l.includes('ledger: no user'))).toBe(true);
    expect(w.h.sqlite.query('select count(*) as n from usage_logs where user_id = ?').get(userId)).toEqual({ n: 0 });
  });

  test('an upstream application close code is passed on, after an error event', async () => {
    const c = open();
    await c.opened;
    await c.waitFor('session.created');
    up.closeAll(4000, 'beta_api_shape_disabled');
    expect(await c.waitClose()).toEqual({ code: 4000, reason: 'beta_api_shape_disabled' });
    expect(c.events().at(-1).error.code).toBe('upstream_closed');
  });

  test('no session slot or reservation leaks once every session has ended', async () => {
    for (const c of clients.splice(0)) if (c.ws.readyState <= 1) { c.ws.close(); await c.waitClose(); }
    await up.until(() => w.service.liveCount === 0);
    expect(w.quota.available(w.userId)).toBe(w.quota.balance(w.userId));
  });
});
