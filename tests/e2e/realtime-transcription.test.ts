/**
 * Input audio transcription is billed: a session that turns it on has the upstream transcribe each committed
 * audio item with a model it bills apart from any response (the usage arrives on
 * conversation.item.input_audio_transcription.completed). Each one is charged once at that model's price; a
 * model without a price bills at the session's, never free.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { costOf } from '@gw/core';
import { SettlementsRepo } from '@gw/db';
import { GatedSink } from '../helpers/gated-sink';
import { SAMPLE_USAGE, startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';
import { PRICE, RESPONSE_CREATE, bearerOf, channel, open, wire, type Wiring } from '../helpers/realtime-wiring';

const TR = { model: 'gpt-4o-transcribe', input: 2_500_000, output: 10_000_000, cache_read: 0, audio_input: 6_000_000, audio_output: 0, context_window: 16_000 };
const TOKENS = { type: 'tokens', total_tokens: 26, input_tokens: 17, input_token_details: { text_tokens: 0, audio_tokens: 17 }, output_tokens: 9 };
const TR_COST = costOf([[17, TR.audio_input], [9, TR.output]]);

let g: Wiring;
let d: Wiring;
let gate: GatedSink;
let u: RealtimeUpstreamDouble;
beforeAll(async () => {
  u = startRealtimeUpstream();
  g = await wire({ REALTIME_MAX_SESSIONS_PER_KEY: '0' });
  // Settlements that commit later, as in PostgreSQL mode.
  d = await wire({ REALTIME_MAX_SESSIONS_PER_KEY: '0' }, { durable: (h) => (gate = new GatedSink(new SettlementsRepo(h.sqlite))) });
  for (const x of [g, d]) {
    await x.book.upsert(TR);
    x.channels.push(channel(1, u));
  }
});
afterAll(async () => { gate.release(); await g.stop(); await d.stop(); await u.stop(); });

const rows = (userId: number, w = g) => w.h.sqlite.query(
  "select request_id, model, upstream_model, billed_model, input_tokens, audio_input_tokens, output_tokens, cost, usage_flag from usage_logs where user_id = ? and kind = 'realtime' order by id",
).all(userId) as any[];
const completed = (item: string, usage?: unknown) => JSON.stringify({
  type: 'conversation.item.input_audio_transcription.completed', event_id: `ev_${item}`, item_id: item, content_index: 0, transcript: 'hello there, how are you', ...(usage ? { usage } : {}),
});

async function session(balance = 50_000_000, w = g, models: string[] | null = null) {
  const { key, userId } = await w.addKey(balance, { models });
  const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key), w);
  await c.opened;
  await c.waitFor('session.created');
  return { c, userId, conn: u.connections.at(-1)!.id };
}

async function closeAndSettle(c: Awaited<ReturnType<typeof session>>['c'], w = g) {
  c.ws.close();
  await c.waitClose();
  await Bun.sleep(50);
  w.quota.flush?.();
}

describe('realtime input transcription', () => {
  test.each([['immediate', () => g], ['durable', () => d]] as const)('each completed transcription is billed once at its model price; the client gets every event (%s settlement)', async (_mode, of) => {
    const w = of();
    const { c, userId, conn } = await session(50_000_000, w);
    c.ws.send(JSON.stringify({ type: 'session.update', session: { type: 'realtime', audio: { input: { transcription: { model: 'gpt-4o-transcribe' } } } } }));
    u.send(JSON.stringify({ type: 'session.updated', event_id: 'ev_su', session: { type: 'realtime', audio: { input: { transcription: { model: 'gpt-4o-transcribe' } } } } }), conn);
    await c.waitFor('session.updated');
    u.send(completed('item_1', TOKENS), conn);
    u.send(completed('item_1', TOKENS), conn); // repeated: billed once
    u.send(completed('item_2', TOKENS), conn);
    await c.waitFor('conversation.item.input_audio_transcription.completed', 3);
    await closeAndSettle(c, w);
    const billed = rows(userId, w);
    expect(billed.map((r) => ({ ...r, request_id: r.request_id.replace(/^rt_\w+?_/, '') }))).toEqual(['item_1', 'item_2'].map((item) => ({
      request_id: `tr_${item}_0`, model: 'gpt-realtime', upstream_model: 'gpt-4o-transcribe', billed_model: 'gpt-4o-transcribe',
      input_tokens: 0, audio_input_tokens: 17, output_tokens: 9, cost: TR_COST, usage_flag: '',
    })));
    expect(w.quota.balance(userId)).toBe(50_000_000 - 2 * TR_COST);
    // The session's record counts what it cost (no response was made).
    expect(w.h.sqlite.query('select responses, cost from realtime_sessions where user_id = ?').get(userId)).toEqual({ responses: 0, cost: 2 * TR_COST });
  });

  test('a transcription session (beta): the model its transcription_session.updated confirms is the one billed', async () => {
    const { c, userId, conn } = await session();
    const confirmed = { input_audio_transcription: { model: 'gpt-4o-transcribe' }, turn_detection: null };
    c.ws.send(JSON.stringify({ type: 'transcription_session.update', session: confirmed }));
    u.send(JSON.stringify({ type: 'transcription_session.updated', event_id: 'ev_tsu', session: { object: 'realtime.transcription_session', ...confirmed } }), conn);
    await c.waitFor('transcription_session.updated');
    u.send(completed('item_t', TOKENS), conn);
    await c.waitFor('conversation.item.input_audio_transcription.completed');
    await closeAndSettle(c);
    expect(rows(userId).map((r) => [r.billed_model, r.cost])).toEqual([['gpt-4o-transcribe', TR_COST]]);
  });

  test('a key with a model allow-list may only transcribe with a model of it: another is refused, not forwarded, the session kept', async () => {
    const { c, conn } = await session(50_000_000, g, ['gpt-realtime', 'whisper-1']);
    const refused = [
      { type: 'session.update', session: { type: 'realtime', audio: { input: { transcription: { model: 'gpt-4o-transcribe' } } } } },
      { type: 'session.update', session: { input_audio_transcription: { model: 'gpt-4o-transcribe' } } },
      // Spellings a case-insensitive upstream reads as the setting, a second model beside an allowed one, none (the upstream's default).
      { type: 'session.update', session: { type: 'realtime', audio: { input: { Transcription: { model: 'gpt-4o-transcribe' } } } } },
      { type: 'session.update', session: { input_audio_transcription: { model: 'whisper-1', Model: 'gpt-4o-transcribe' } } },
      { type: 'session.update', session: { input_audio_transcription: {} } },
      { type: 'session.update', session: { input_audio_transcription: { model: 7 } } },
      // The beta transcription session's own update, which a lenient upstream may honour in any session.
      { type: 'transcription_session.update', session: { input_audio_transcription: { model: 'gpt-4o-transcribe' } } },
    ];
    for (const e of refused) c.ws.send(JSON.stringify(e));
    const errors = await c.waitFor('error', refused.length);
    expect(errors.error).toMatchObject({ type: 'invalid_request_error', code: 'model_not_allowed' });
    expect(c.events().filter((e) => e.type === 'error').map((e) => e.error.message.match(/model (.*) for/)?.[1]))
      .toEqual(['gpt-4o-transcribe', 'gpt-4o-transcribe', 'gpt-4o-transcribe', 'gpt-4o-transcribe', '(no model)', '(not a string)', 'gpt-4o-transcribe']);
    const allowed = [
      { type: 'session.update', session: { input_audio_transcription: { model: 'whisper-1' }, instructions: 'hi' } },
      { type: 'session.update', session: { type: 'realtime', audio: { input: { transcription: null } } } },
      { type: 'transcription_session.update', session: { input_audio_transcription: { model: 'whisper-1' } } },
    ].map((e) => JSON.stringify(e));
    for (const e of allowed) c.ws.send(e);
    await u.until(() => u.received.filter((r) => r.conn === conn).length >= allowed.length);
    await Bun.sleep(20);
    expect(u.received.filter((r) => r.conn === conn).map((r) => String(r.data))).toEqual(allowed);
    expect(c.close).toBeNull();
    c.ws.close();
  });

  test('turning transcription on is never refused for a key without an allow-list (clients do it in their first update), whatever the model', async () => {
    const { c, conn } = await session();
    const updates = [
      { type: 'session.update', session: { input_audio_transcription: { model: 'whisper-1' }, instructions: 'hi' } },
      { type: 'session.update', session: { type: 'realtime', audio: { input: { transcription: { model: 'gpt-4o-transcribe' } } } } },
      { type: 'session.update', session: { input_audio_transcription: null } },
    ].map((e) => JSON.stringify(e));
    for (const e of updates) c.ws.send(e);
    await u.until(() => u.received.filter((r) => r.conn === conn).length === updates.length);
    expect(u.received.filter((r) => r.conn === conn).map((r) => String(r.data))).toEqual(updates);
    expect(c.events().some((e) => e.type === 'error')).toBe(false);
    c.ws.close();
  });

  test('a transcription the upstream applies without a price bills at the session price; a duration and a missing usage are estimated', async () => {
    const { c, userId, conn } = await session();
    u.send(JSON.stringify({ type: 'session.updated', event_id: 'ev_su', session: { input_audio_transcription: { model: 'whisper-1' } } }), conn);
    await c.waitFor('session.updated');
    u.send(completed('item_d', { type: 'duration', seconds: 2.05 }), conn);
    u.send(completed('item_n'), conn);
    await c.waitFor('conversation.item.input_audio_transcription.completed', 2);
    await closeAndSettle(c);
    const billed = rows(userId);
    expect(billed.map((r) => [r.billed_model, r.upstream_model, r.audio_input_tokens, r.output_tokens, r.cost, r.usage_flag])).toEqual([
      ['gpt-realtime', 'whisper-1', 21, 0, costOf([[21, PRICE.audio_input]]), 'estimated'],
      ['gpt-realtime', 'whisper-1', 0, billed[1].output_tokens, costOf([[billed[1].output_tokens, PRICE.output]]), 'estimated'],
    ]);
    expect(billed[1].output_tokens).toBeGreaterThan(0);
  });

  test('a hostile count is bounded: at most the context window of input and the default max output', async () => {
    const { c, userId, conn } = await session();
    u.send(JSON.stringify({ type: 'session.updated', event_id: 'ev_su', session: { type: 'realtime', audio: { input: { transcription: { model: 'gpt-4o-transcribe' } } } } }), conn);
    await c.waitFor('session.updated');
    u.send(completed('item_h', { type: 'tokens', input_tokens: 1e9, input_token_details: { text_tokens: 0, audio_tokens: 1e9 }, output_tokens: 1e9 }), conn);
    await c.waitFor('conversation.item.input_audio_transcription.completed');
    await closeAndSettle(c);
    expect(rows(userId).map((r) => [r.audio_input_tokens, r.output_tokens, r.usage_flag])).toEqual([[TR.context_window, 4096, 'implausible']]);
  });

  test('an unusable audio count is billed at the reported input total, else the context window, flagged invalid, never as 0', async () => {
    const { c, userId, conn } = await session();
    u.send(JSON.stringify({ type: 'session.updated', event_id: 'ev_su', session: { type: 'realtime', audio: { input: { transcription: { model: 'gpt-4o-transcribe' } } } } }), conn);
    await c.waitFor('session.updated');
    const bad = ['-5', '1.5', '"7"', '1e308', '9007199254740993'];
    for (const [i, b] of bad.entries()) u.send(completed(`item_b${i}`, { ...TOKENS, input_token_details: { text_tokens: 0, audio_tokens: JSON.parse(b) } }), conn);
    u.send(completed('item_bt', { ...TOKENS, input_tokens: -1, input_token_details: { text_tokens: 0, audio_tokens: -1 } }), conn);
    await c.waitFor('conversation.item.input_audio_transcription.completed', bad.length + 1);
    await closeAndSettle(c);
    expect(rows(userId).map((r) => [r.audio_input_tokens, r.output_tokens, r.usage_flag])).toEqual([
      ...bad.map(() => [17, 9, 'invalid']),
      // No committed item seen for it: the transcription model's context window.
      [TR.context_window, 9, 'invalid'],
    ]);
    expect(await g.ledger.sum(userId)).toBe(g.quota.balance(userId));
  });

  test('an unusable text input count is billed at the rest of the input total (else the context window); an unsplit total as audio; never as 0', async () => {
    const { c, userId, conn } = await session();
    u.send(JSON.stringify({ type: 'session.updated', event_id: 'ev_su', session: { type: 'realtime', audio: { input: { transcription: { model: 'gpt-4o-transcribe' } } } } }), conn);
    await c.waitFor('session.updated');
    const bad = ['-5', '1.5', '"7"', '1e308', '9007199254740993'];
    // A prompt's text (5 tokens) beside 17 audio tokens: the text count unusable, the total usable.
    for (const [i, b] of bad.entries()) u.send(completed(`item_t${i}`, { ...TOKENS, input_tokens: 22, input_token_details: { text_tokens: JSON.parse(b), audio_tokens: 17 } }), conn);
    // The total unusable too: the transcription model's context window, less the audio.
    u.send(completed('item_tt', { ...TOKENS, input_tokens: 'x', input_token_details: { text_tokens: -1, audio_tokens: 17 } }), conn);
    // No breakdown: the input is the audio transcribed, billed at the audio price (before: all at the text price).
    u.send(completed('item_ns', { type: 'tokens', total_tokens: 26, input_tokens: 17, output_tokens: 9 }), conn);
    await c.waitFor('conversation.item.input_audio_transcription.completed', bad.length + 2);
    await closeAndSettle(c);
    expect(rows(userId).map((r) => [r.input_tokens, r.audio_input_tokens, r.output_tokens, r.cost, r.usage_flag])).toEqual([
      ...bad.map(() => [5, 17, 9, costOf([[5, TR.input], [17, TR.audio_input], [9, TR.output]]), 'invalid']),
      [TR.context_window - 17, 17, 9, costOf([[TR.context_window - 17, TR.input], [17, TR.audio_input], [9, TR.output]]), 'invalid'],
      [0, 17, 9, TR_COST, 'estimated'],
    ]);
    expect(await g.ledger.sum(userId)).toBe(g.quota.balance(userId));
  });

  test('frames read behind a pending commit when the session ends are still metered: the response by its usage, the transcription billed', async () => {
    const { c, userId, conn } = await session(50_000_000, d);
    u.send(JSON.stringify({ type: 'session.updated', event_id: 'ev_su', session: { type: 'realtime', audio: { input: { transcription: { model: 'gpt-4o-transcribe' } } } } }), conn);
    await c.waitFor('session.updated');
    u.stopBefore = 'response.done';
    try {
      c.ws.send(RESPONSE_CREATE);
      const created = await c.waitFor('response.created');
      gate.close();
      // In one write: the response.done waits for its commit, and the transcription read with it waits behind it.
      u.send(JSON.stringify({ type: 'response.done', event_id: 'ev_d', response: { id: created.response.id, object: 'realtime.response', status: 'completed', usage: SAMPLE_USAGE } }) , conn);
      u.send(completed('item_late', TOKENS), conn);
      await u.until(() => gate.waiting === 1);
      await Bun.sleep(30);
      expect(c.events().some((e) => e.type === 'response.done')).toBe(false);
      c.ws.close();
      await c.waitClose();
      await Bun.sleep(30);
    } finally {
      u.stopBefore = null;
      gate.release();
    }
    await Bun.sleep(100);
    const billed = rows(userId, d);
    expect(billed.map((r) => [r.request_id.replace(/^rt_\w+?_/, ''), r.usage_flag])).toEqual([[expect.stringMatching(/^resp_/), ''], ['tr_item_late_0', '']]);
    expect(billed[1].cost).toBe(TR_COST);
  });
});
