/**
 * Realtime responses that never reach response.done, and holds matched to their responses, through the
 * whole gateway over real sockets: a response cut by the client or the upstream is billed once on what it
 * delivered (flagged `estimated`, the cause as its error code); a create the upstream never answered is
 * billed as unanswered (tests/e2e/realtime-unanswered.test.ts); a server-VAD response never takes a client's
 * smaller hold. A cut response's input is bounded by what the session put through the relay
 * (libs/realtime/src/context.ts), not the context window; a started
 * input transcription whose completion never arrives is billed on its audio.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'bun:test';
import { costOf } from '@gw/core';
import { TEST_BACKEND, makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { MAX_CHECKPOINTED } from '@gw/realtime';
import { RealtimeTestClient, startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';
import { availableOf } from './relay-setup';

const CTX = 16_000;
const PRICE = { model: 'gpt-realtime', input: 4_000_000, output: 16_000_000, cache_read: 400_000, cache_write: 0, audio_input: 32_000_000, audio_output: 64_000_000, context_window: CTX };
const TR = { model: 'gpt-4o-transcribe', input: 2_500_000, output: 10_000_000, cache_read: 0, cache_write: 0, audio_input: 6_000_000, audio_output: 0, context_window: 16_000 };

/**
 * The input bound of a cut response (context.ts): 1,024 tokens of formatting, the bytes of every client frame
 * but audio appends and of the largest session frame the upstream sent, output of earlier responses as
 * reported, and appended audio at 20 tokens a second (PCM16 24 kHz unless the session named G.711).
 */
const OVERHEAD = 1024;
const bytes = (frames: string[]) => frames.reduce((n, f) => n + Buffer.byteLength(f), 0);
const append = (pcmBytes: number) => JSON.stringify({ type: 'input_audio_buffer.append', audio: Buffer.alloc(pcmBytes).toString('base64') });
/** Appended audio as the relay bounds it: each frame's length read as base64, over the bytes per second. */
const audioBytes = (frames: string[]) => frames.reduce((n, f) => n + Math.floor((f.length * 3) / 4), 0);
const sessionBytes = (c: RealtimeTestClient) => Buffer.byteLength(c.frames.find((f) => String(f).includes('"session.created"')) as string);

let gw: TestGateway;
let up: RealtimeUpstreamDouble;
const clients: RealtimeTestClient[] = [];

beforeAll(async () => {
  up = startRealtimeUpstream();
  gw = await startGateway({ REALTIME_DEFAULT_MODEL: 'gpt-realtime' });
  const ch = await gw.api('POST', '/api/channel/', { name: 'rt', type: 'openai', base_url: up.url, key: 'upstream-secret', timeout_ms: 5000, models: ['gpt-realtime'] });
  expect(ch.status).toBe(200);
  expect((await gw.api('PUT', '/api/pricing/', PRICE)).status).toBe(200);
  expect((await gw.api('PUT', '/api/pricing/', TR)).status).toBe(200);
});
afterEach(() => {
  up.stopBefore = null;
  up.echo = true;
});
afterAll(async () => {
  for (const c of clients) if (c.ws.readyState <= 1) c.ws.close();
  await gw.stop();
  await up.stop();
});

async function session(balance: number): Promise<{ id: number; c: RealtimeTestClient; conn: number }> {
  const u = await makeUser(gw);
  await gw.services.ledger.apply({ userId: u.id, kind: 'topup', amount: balance, ref: `seed-${u.id}`, at: 1 });
  const r = await gw.api('POST', '/api/token/', { name: 'rt' }, u.token);
  expect(r.status).toBe(200);
  const c = new RealtimeTestClient(`${gw.url.replace('http://', 'ws://')}/v1/realtime?model=gpt-realtime`, { headers: { authorization: `Bearer ${r.body.data.key}` } });
  clients.push(c);
  await c.opened;
  await c.waitFor('session.created');
  return { id: u.id, c, conn: up.connections.at(-1)!.id };
}

/** The user's realtime rows once the session record is written (after its last settlement). */
async function ended(userId: number): Promise<any[]> {
  for (let i = 0; i < 250; i++) {
    if (await gw.db.get('select 1 as x from realtime_sessions where user_id = ?', userId)) break;
    await Bun.sleep(20);
  }
  return gw.db.all('select request_id, input_tokens, audio_input_tokens, output_tokens, audio_output_tokens, cost, usage_flag, error_code from usage_logs where user_id = ? order by id', userId);
}

/** Nothing stays held: what the user can reserve is its balance (behind the cluster harness: every node's view). */
async function noHolds(userId: number, balance: number): Promise<void> {
  for (let i = 0; i < 100 && (await availableOf(gw, userId)) !== balance; i++) await Bun.sleep(20);
  expect(await availableOf(gw, userId)).toBe(balance);
}

describe('a realtime response cut before its response.done', () => {
  test('the client closes after the whole text: billed once on the delivered text, flagged estimated, client_closed', async () => {
    up.stopBefore = 'response.done';
    const { id, c } = await session(10_000_000);
    c.ws.send('{"type":"response.create"}');
    expect((await c.waitFor('response.output_text.done')).text).toBe('Hello from the double');
    c.ws.close(1000);
    await c.waitClose();
    const rows = await ended(id);
    // Input: the conversation held the upstream's session and the client's one response.create, not a context window.
    // The deltas "Hello", " from", " the double" estimate 2 + 2 + 3 tokens (4 characters a token, each rounded up).
    const input = OVERHEAD + sessionBytes(c) + bytes(['{"type":"response.create"}']);
    const cost = costOf([[input, PRICE.input], [7, PRICE.output]]);
    expect(input).toBeLessThan(CTX / 4);
    expect(rows).toEqual([{ request_id: expect.stringMatching(/^rt_\w+_resp_\d+$/), input_tokens: input, audio_input_tokens: 0, output_tokens: 7, audio_output_tokens: 0, cost, usage_flag: 'estimated', error_code: 'client_closed' }]);
    expect(await gw.services.ledger.sum(id)).toBe(10_000_000 - cost);
    expect(await gw.db.get('select responses, cost from realtime_sessions where user_id = ?', id)).toEqual({ responses: 1, cost });
    await noHolds(id, 10_000_000 - cost);
  }, 20_000);

  test('the upstream drops mid-response (server-started, spoken): billed on the audio and transcript delivered, upstream_disconnected', async () => {
    const { id, c, conn } = await session(10_000_000);
    up.send('{"type":"response.created","event_id":"e1","response":{"id":"resp_vad","status":"in_progress","max_output_tokens":"inf"}}', conn);
    // One second of PCM16 at 24 kHz (48,000 bytes) is 20 audio tokens; the transcript's 40 characters are 10 tokens.
    const second = Buffer.alloc(48_000).toString('base64');
    for (let i = 0; i < 2; i++) up.send(JSON.stringify({ type: 'response.output_audio.delta', event_id: `a${i}`, response_id: 'resp_vad', item_id: 'i', output_index: 0, content_index: 0, delta: second }), conn);
    up.send(JSON.stringify({ type: 'response.output_audio_transcript.delta', response_id: 'resp_vad', delta: 'x'.repeat(40) }), conn);
    await c.waitFor('response.output_audio_transcript.delta');
    up.drop();
    expect((await c.waitClose()).code).toBe(1011);
    const rows = await ended(id);
    // The client sent nothing: the input is the upstream's session and the formatting allowance.
    const input = OVERHEAD + sessionBytes(c);
    const cost = costOf([[input, PRICE.input], [10, PRICE.output], [40, PRICE.audio_output]]);
    expect(rows).toEqual([{ request_id: expect.stringMatching(/_resp_vad$/), input_tokens: input, audio_input_tokens: 0, output_tokens: 10, audio_output_tokens: 40, cost, usage_flag: 'estimated', error_code: 'upstream_disconnected' }]);
    expect(await gw.services.ledger.sum(id)).toBe(10_000_000 - cost);
    await noHolds(id, 10_000_000 - cost);
  }, 20_000);

  test('a response.create never answered (no response.created, no output): billed once on the conversation bound, no output (tests/e2e/realtime-unanswered.test.ts)', async () => {
    up.stopBefore = 'response.created';
    const { id, c, conn } = await session(10_000_000);
    c.ws.send('{"type":"response.create"}');
    // This session's create (an earlier test's would match before this one is forwarded, e.g. while its hold is decided on PostgreSQL).
    await up.until(() => up.received.some((f) => f.conn === conn && String(f.data).includes('response.create')));
    c.ws.close(1000);
    await c.waitClose();
    // The upstream was asked and read the conversation: before, this bill was 0 and create+close was free.
    const input = OVERHEAD + sessionBytes(c) + bytes(['{"type":"response.create"}']);
    const cost = costOf([[input, PRICE.input]]);
    expect(await ended(id)).toEqual([{ request_id: expect.stringMatching(/_unanswered_\d+$/), input_tokens: input, audio_input_tokens: 0, output_tokens: 0, audio_output_tokens: 0, cost, usage_flag: 'estimated', error_code: 'client_closed' }]);
    await noHolds(id, 10_000_000 - cost);
  }, 20_000);

  test('a response.done repeated by the upstream is billed once', async () => {
    const { id, c, conn } = await session(10_000_000);
    const usage = { total_tokens: 110, input_tokens: 100, output_tokens: 10, input_token_details: { text_tokens: 100, audio_tokens: 0, image_tokens: 0, cached_tokens: 0 }, output_token_details: { text_tokens: 10, audio_tokens: 0 } };
    const done = JSON.stringify({ type: 'response.done', response: { id: 'resp_twice', status: 'completed', usage } });
    up.send('{"type":"response.created","response":{"id":"resp_twice","status":"in_progress"}}', conn);
    up.send(done, conn);
    up.send(done, conn);
    await c.waitFor('response.done', 2);
    c.ws.close(1000);
    await c.waitClose();
    const cost = costOf([[100, PRICE.input], [10, PRICE.output]]);
    expect((await ended(id)).map((r) => [r.cost, r.usage_flag])).toEqual([[cost, '']]);
    expect(await gw.services.ledger.sum(id)).toBe(10_000_000 - cost);
  }, 20_000);

  test('an upstream that names every response alike (one id reused): each response it starts is billed, once, on its own usage', async () => {
    const { id, c, conn } = await session(10_000_000);
    const usage = (out: number) => ({ total_tokens: 100 + out, input_tokens: 100, output_tokens: out, input_token_details: { text_tokens: 100, audio_tokens: 0, image_tokens: 0, cached_tokens: 0 }, output_token_details: { text_tokens: out, audio_tokens: 0 } });
    const created = '{"type":"response.created","response":{"id":"resp_same","status":"in_progress"}}';
    const delta = '{"type":"response.output_text.delta","response_id":"resp_same","delta":"Hello there, this is output"}';
    for (const out of [10, 20]) {
      up.send(created, conn);
      up.send(delta, conn);
      up.send(JSON.stringify({ type: 'response.done', response: { id: 'resp_same', status: 'completed', usage: usage(out) } }), conn);
    }
    // The third reuse is cut by the close: billed on what it delivered, not dropped as already billed.
    up.send(created, conn);
    up.send(delta, conn);
    await c.waitFor('response.done', 2);
    await c.waitFor('response.output_text.delta', 3);
    c.ws.close(1000);
    await c.waitClose();
    const rows = await ended(id);
    expect(rows.map((r) => [r.output_tokens, r.usage_flag, r.error_code])).toEqual([[10, '', ''], [20, '', ''], [rows[2]?.output_tokens, 'estimated', 'client_closed']]);
    expect(rows[2].output_tokens).toBeGreaterThan(0);
    expect(new Set(rows.map((r) => r.request_id)).size).toBe(3);
    const sum = rows.reduce((n, r) => n + r.cost, 0);
    expect(rows[0].cost).toBe(costOf([[100, PRICE.input], [10, PRICE.output]]));
    expect(rows[1].cost).toBe(costOf([[100, PRICE.input], [20, PRICE.output]]));
    expect(await gw.services.ledger.sum(id)).toBe(10_000_000 - sum);
    await noHolds(id, 10_000_000 - sum);
  }, 20_000);

  test('an upstream that never sends response.created and names every response alike: each is billed once, a repeated response.done is a copy', async () => {
    const { id, c, conn } = await session(10_000_000);
    const usage = (out: number) => ({ total_tokens: 100 + out, input_tokens: 100, output_tokens: out, input_token_details: { text_tokens: 100, audio_tokens: 0, image_tokens: 0, cached_tokens: 0 }, output_token_details: { text_tokens: out, audio_tokens: 0 } });
    const delta = '{"type":"response.output_text.delta","response_id":"resp_anon","delta":"Hello there, this is output"}';
    const done = (out: number) => JSON.stringify({ type: 'response.done', response: { id: 'resp_anon', status: 'completed', usage: usage(out) } });
    for (const out of [10, 20]) {
      up.send(delta, conn);
      up.send(done(out), conn);
    }
    // Nothing relayed since the last one: a copy, not another response.
    up.send(done(20), conn);
    // Output again under the id: a fourth response, cut by the close (billed on what it delivered).
    up.send(delta, conn);
    await c.waitFor('response.done', 3);
    await c.waitFor('response.output_text.delta', 3);
    c.ws.close(1000);
    await c.waitClose();
    const rows = await ended(id);
    // Before, only the first was billed: the later deltas were dropped as its output, the later response.done as its copy.
    expect(rows.map((r) => [r.output_tokens, r.usage_flag, r.error_code])).toEqual([[10, '', ''], [20, '', ''], [7, 'estimated', 'client_closed']]);
    expect(rows.map((r) => r.request_id.replace(/^rt_\w+?_resp/, 'resp'))).toEqual(['resp_anon', 'resp_anon~2', 'resp_anon~3']);
    const sum = rows.reduce((n, r) => n + r.cost, 0);
    expect(rows[1].cost).toBe(costOf([[100, PRICE.input], [20, PRICE.output]]));
    expect(await gw.services.ledger.sum(id)).toBe(10_000_000 - sum);
    await noHolds(id, 10_000_000 - sum);
  }, 20_000);

  test('upstream response ids PostgreSQL cannot index or store (10,000 random characters, a NUL) are billed like any other, once', async () => {
    // Random, so PostgreSQL cannot compress it under its index-entry limit (~2.7 kB); text cannot hold a NUL at all.
    const long = `resp_${Array.from({ length: 10_000 }, () => 'abcdefghijklmnopqrstuvwxyz0123456789'[Math.floor(Math.random() * 36)]).join('')}`;
    for (const rid of [long, 'resp_\u0000x']) {
      const { id, c, conn } = await session(10_000_000);
      const usage = { total_tokens: 110, input_tokens: 100, output_tokens: 10, input_token_details: { text_tokens: 100, audio_tokens: 0, image_tokens: 0, cached_tokens: 0 }, output_token_details: { text_tokens: 10, audio_tokens: 0 } };
      up.send(JSON.stringify({ type: 'response.created', response: { id: rid, status: 'in_progress' } }), conn);
      up.send(JSON.stringify({ type: 'response.output_text.delta', response_id: rid, delta: 'Hello' }), conn);
      up.send(JSON.stringify({ type: 'response.done', response: { id: rid, status: 'completed', usage } }), conn);
      up.send(JSON.stringify({ type: 'response.done', response: { id: rid, status: 'completed', usage } }), conn);
      await c.waitFor('response.done', 2);
      c.ws.close(1000);
      // Before, on PostgreSQL: the usage row's insert failed, the session ended 1011 and the response was free.
      expect((await c.waitClose()).code).toBe(1000);
      const cost = costOf([[100, PRICE.input], [10, PRICE.output]]);
      const rows = await ended(id);
      expect(rows.map((r) => [r.cost, r.usage_flag])).toEqual([[cost, '']]);
      expect(rows[0].request_id).toMatch(/^rt_[A-Za-z0-9]+_#[0-9a-f]{32}$/);
      expect(await gw.services.ledger.sum(id)).toBe(10_000_000 - cost);
    }
    // A failed response's error code is stored too (scrubbed, 64 characters): a NUL in it failed the insert alike.
    const { id, c, conn } = await session(10_000_000);
    const usage = { total_tokens: 110, input_tokens: 100, output_tokens: 10, input_token_details: { text_tokens: 100, audio_tokens: 0, image_tokens: 0, cached_tokens: 0 }, output_token_details: { text_tokens: 10, audio_tokens: 0 } };
    up.send(JSON.stringify({ type: 'response.done', response: { id: 'resp_failed', status: 'failed', status_details: { error: { code: 'bad\u0000code' } }, usage } }), conn);
    await c.waitFor('response.done');
    c.ws.close(1000);
    expect((await c.waitClose()).code).toBe(1000);
    const rows = await ended(id);
    expect(rows.map((r) => [r.cost, r.error_code])).toEqual([[costOf([[100, PRICE.input], [10, PRICE.output]]), 'badcode']]);
    // A transcription: its model is whatever the session names (the client's session.update, as the upstream confirms
    // it) and its item id the upstream's; a NUL in either failed the insert alike.
    const t = await session(10_000_000);
    up.send(JSON.stringify({ type: 'session.updated', session: { type: 'realtime', audio: { input: { transcription: { model: 'tr\u0000model' } } } } }), t.conn);
    await t.c.waitFor('session.updated');
    up.send(JSON.stringify({ type: 'conversation.item.input_audio_transcription.completed', item_id: 'item\u0000', content_index: 0, transcript: 'hi',
      usage: { type: 'tokens', total_tokens: 60, input_tokens: 50, input_token_details: { text_tokens: 0, audio_tokens: 50 }, output_tokens: 10 } }), t.conn);
    await t.c.waitFor('conversation.item.input_audio_transcription.completed');
    t.c.ws.close(1000);
    expect((await t.c.waitClose()).code).toBe(1000);
    const tr = await ended(t.id);
    expect(tr.map((r) => [r.audio_input_tokens, r.output_tokens, r.cost > 0])).toEqual([[50, 10, true]]);
    expect(tr[0].request_id).toMatch(/_tr_#[0-9a-f]{32}_0$/);
  }, 20_000);

  test('a client close reason with a NUL: the session record is written all the same', async () => {
    const { id, c } = await session(10_000_000);
    c.ws.close(1000, 'bye\u0000now');
    await c.waitClose();
    await ended(id);
    expect(await gw.db.get('select close_reason from realtime_sessions where user_id = ?', id)).toEqual({ close_reason: 'byenow' });
  }, 20_000);

  test('a response.done before its response.created (and that created repeated): billed once', async () => {
    const { id, c, conn } = await session(10_000_000);
    const usage = { total_tokens: 110, input_tokens: 100, output_tokens: 10, input_token_details: { text_tokens: 100, audio_tokens: 0, image_tokens: 0, cached_tokens: 0 }, output_token_details: { text_tokens: 10, audio_tokens: 0 } };
    up.send(JSON.stringify({ type: 'response.done', response: { id: 'resp_late', status: 'completed', usage } }), conn);
    up.send('{"type":"response.created","response":{"id":"resp_late","status":"in_progress"}}', conn);
    up.send('{"type":"response.created","response":{"id":"resp_late","status":"in_progress"}}', conn);
    await c.waitFor('response.created', 2);
    c.ws.close(1000);
    await c.waitClose();
    const cost = costOf([[100, PRICE.input], [10, PRICE.output]]);
    expect((await ended(id)).map((r) => [r.cost, r.usage_flag])).toEqual([[cost, '']]);
    expect(await gw.services.ledger.sum(id)).toBe(10_000_000 - cost);
    await noHolds(id, 10_000_000 - cost);
  }, 20_000);
});

describe('holds matched to their responses', () => {
  test('a server-VAD response started while a 1-token response.create waits is billed at its own limit; the refused create gives its hold back', async () => {
    up.stopBefore = 'response.created'; // the upstream answers the client's create only with the error below
    const { id, c, conn } = await session(10_000_000);
    c.ws.send('{"type":"response.create","event_id":"evt_tiny","response":{"max_output_tokens":1}}');
    await up.until(() => up.received.some((f) => String(f.data).includes('"max_output_tokens":1')));
    up.send('{"type":"response.created","response":{"id":"resp_vad2","status":"in_progress","max_output_tokens":"inf"}}', conn);
    // The upstream names the id the create reached it under (the gateway's); the client reads its own.
    const named = JSON.parse(String(up.received.find((f) => String(f.data).includes('"max_output_tokens":1'))!.data)).event_id;
    up.send(JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', code: 'conversation_already_has_active_response', message: 'Conversation already has an active response', param: null, event_id: named } }), conn);
    expect((await c.waitFor('error')).error.event_id).toBe('evt_tiny');
    const usage = { total_tokens: 4100, input_tokens: 100, output_tokens: 4000, input_token_details: { text_tokens: 100, audio_tokens: 0, image_tokens: 0, cached_tokens: 0 }, output_token_details: { text_tokens: 4000, audio_tokens: 0 } };
    up.send(JSON.stringify({ type: 'response.done', response: { id: 'resp_vad2', status: 'completed', usage } }), conn);
    await c.waitFor('response.done');
    // Only the VAD response's hold was taken and settled: the refused create's is back before the session ends.
    const cost = costOf([[100, PRICE.input], [4000, PRICE.output]]);
    await noHolds(id, 10_000_000 - cost);
    c.ws.close(1000);
    await c.waitClose();
    expect((await ended(id)).map((r) => [r.output_tokens, r.cost, r.usage_flag])).toEqual([[4000, cost, '']]);
  }, 20_000);
});

describe('the input of a cut response: bounded by what passed through the relay', () => {
  const created = (id: string) => JSON.stringify({ type: 'response.created', response: { id, object: 'realtime.response', status: 'in_progress' } });
  const creates = (conn: number) => up.received.filter((r) => r.conn === conn && String(r.data).includes('"response.create"')).length;

  test('audio, text and an earlier response: the cut one bills them (audio at the audio price), far below the window', async () => {
    up.stopBefore = 'response.created'; // responses are driven by hand below
    up.echo = false;
    const { id, c, conn } = await session(10_000_000);
    const audio = [append(48_000), append(48_000)]; // two seconds of PCM16 at 24 kHz
    const text = ['{"type":"input_audio_buffer.commit"}', JSON.stringify({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'x'.repeat(1000) }] } }), '{"type":"response.create"}'];
    for (const f of [...audio, ...text]) c.ws.send(f);
    await up.until(() => creates(conn) === 1);
    const usage = { total_tokens: 730, input_tokens: 700, output_tokens: 30, input_token_details: { text_tokens: 300, audio_tokens: 400 }, output_token_details: { text_tokens: 10, audio_tokens: 20 } };
    up.send(created('resp_a'), conn);
    up.send(JSON.stringify({ type: 'response.done', response: { id: 'resp_a', status: 'completed', usage } }), conn);
    await c.waitFor('response.done');
    text.push('{"type":"response.create"}');
    c.ws.send(text.at(-1)!);
    await up.until(() => creates(conn) === 2);
    up.send(created('resp_b'), conn);
    up.send(JSON.stringify({ type: 'response.output_text.delta', response_id: 'resp_b', delta: 'abcd' }), conn);
    await c.waitFor('response.output_text.delta');
    c.ws.close(1000);
    await c.waitClose();
    const rows = await ended(id);
    const first = costOf([[300, PRICE.input], [400, PRICE.audio_input], [10, PRICE.output], [20, PRICE.audio_output]]);
    // Two seconds of audio is 40 tokens (and a few for the frames' JSON), plus resp_a's 20 audio tokens read back;
    // text: the client's other frames, the session, resp_a's 10 text tokens.
    const audioIn = Math.ceil((audioBytes(audio) / 48_000) * 20) + 20;
    const textIn = OVERHEAD + sessionBytes(c) + bytes(text) + 10;
    const cut = costOf([[textIn, PRICE.input], [audioIn, PRICE.audio_input], [1, PRICE.output]]);
    expect(audioIn).toBe(61);
    expect(rows).toEqual([
      { request_id: expect.stringMatching(/_resp_a$/), input_tokens: 300, audio_input_tokens: 400, output_tokens: 10, audio_output_tokens: 20, cost: first, usage_flag: '', error_code: '' },
      { request_id: expect.stringMatching(/_resp_b$/), input_tokens: textIn, audio_input_tokens: audioIn, output_tokens: 1, audio_output_tokens: 0, cost: cut, usage_flag: 'estimated', error_code: 'client_closed' },
    ]);
    expect(cut).toBeLessThan(costOf([[CTX, PRICE.input], [1, PRICE.output]]) / 3);
    expect(await gw.services.ledger.sum(id)).toBe(10_000_000 - first - cut);
    await noHolds(id, 10_000_000 - first - cut);
  }, 20_000);

  test('two responses cut together: the later one also reads the earlier one\'s max output (it may have finished unseen)', async () => {
    up.stopBefore = 'response.created';
    up.echo = false;
    const { id, c, conn } = await session(10_000_000);
    up.send(JSON.stringify({ type: 'response.created', response: { id: 'resp_x', status: 'in_progress', max_output_tokens: 100 } }), conn);
    up.send(JSON.stringify({ type: 'response.created', response: { id: 'resp_y', status: 'in_progress', max_output_tokens: 200 } }), conn);
    await c.waitFor('response.created', 2);
    c.ws.close(1000);
    await c.waitClose();
    const base = OVERHEAD + sessionBytes(c);
    // resp_x's 100 tokens may be text or audio: billed at the dearer (audio) price.
    expect((await ended(id)).map((r) => [r.request_id.replace(/^rt_\w+?_/, ''), r.input_tokens, r.audio_input_tokens, r.cost])).toEqual([
      ['resp_x', base, 0, costOf([[base, PRICE.input]])],
      ['resp_y', base, 100, costOf([[base, PRICE.input], [100, PRICE.audio_input]])],
    ]);
  }, 20_000);

  // The checkpoints a crash would bill (SQLite: tests/e2e/realtime-crash.test.ts), read while the session runs.
  test.skipIf(TEST_BACKEND === 'pg')('an upstream starting many responses at once: a few checkpoints kept, none billing a later response\'s output as its input', async () => {
    up.stopBefore = 'response.created';
    up.echo = false;
    // Room for every response's hold (about 0.5M each here).
    const { id, c, conn } = await session(1_000_000_000);
    const n = MAX_CHECKPOINTED + 40;
    for (let i = 0; i < n; i++) up.send(JSON.stringify({ type: 'response.created', response: { id: `resp_${i}`, status: 'in_progress', max_output_tokens: 100 } }), conn);
    up.send('{"type":"response.output_text.delta","response_id":"resp_0","delta":"Hi"}', conn);
    await c.waitFor('response.output_text.delta');
    const rows = () => gw.db.all<{ request_id: string; row: string }>('select request_id, row from realtime_unfinished')
      .then((rs) => rs.filter((r) => JSON.parse(r.row).userId === id).map((r) => ({ id: r.request_id.replace(/^rt_\w+?_/, ''), ...JSON.parse(r.row) })));
    for (let i = 0; i < 100 && !(await rows()).some((r) => r.id === 'resp_0' && r.outputTokens > 0); i++) await Bun.sleep(20);
    const kept = await rows();
    // Before: one row (and write) per response.created, however many the upstream started.
    expect(kept.length).toBe(MAX_CHECKPOINTED);
    // resp_0 started first: the responses started after it are not its input. Before, their max output (100 each)
    // was billed in its checkpoint as audio input, more than the same response cut at the session's end.
    const first = kept.find((r) => r.id === 'resp_0')!;
    expect([first.outputTokens, first.audioInputTokens]).toEqual([1, 0]);
    c.ws.close(1000);
    await c.waitClose();
    const cut = (await ended(id)).find((r) => r.request_id.endsWith('_resp_0'))!;
    expect([cut.input_tokens, cut.audio_input_tokens, cut.output_tokens, cut.cost]).toEqual([first.inputTokens, 0, 1, first.cost]);
    expect(await rows()).toEqual([]);
  }, 20_000);

  test('more than the window: clamped to it, the dearer audio kept whole', async () => {
    up.stopBefore = 'response.done';
    up.echo = false;
    const { id, c } = await session(10_000_000);
    const audio = [append(48_000)];
    c.ws.send(audio[0]!);
    c.ws.send(JSON.stringify({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'y'.repeat(20_000) }] } }));
    c.ws.send('{"type":"response.create"}');
    await c.waitFor('response.output_text.done');
    c.ws.close(1000);
    await c.waitClose();
    const audioIn = Math.ceil((audioBytes(audio) / 48_000) * 20);
    const cost = costOf([[CTX - audioIn, PRICE.input], [audioIn, PRICE.audio_input], [7, PRICE.output]]);
    expect((await ended(id)).map((r) => [r.input_tokens, r.audio_input_tokens, r.cost, r.usage_flag])).toEqual([[CTX - audioIn, audioIn, cost, 'estimated']]);
  }, 20_000);

  test('audio sent inside items, not appended: counted as audio at the audio price, not its base64 as text capped at the window', async () => {
    up.stopBefore = 'response.done';
    up.echo = false;
    const { id, c, conn } = await session(10_000_000);
    // G.711 (8,000 bytes a second): 4 items of 60 s each, 240 s that the upstream reads as 2,400 audio tokens at least
    // (10 a second). As text, their 2.56 MB of base64 filled the 16,000-token window at the text price: 64,000 units,
    // below the 76,800 the upstream could bill for the audio alone.
    c.ws.send(JSON.stringify({ type: 'session.update', session: { type: 'realtime', audio: { input: { format: { type: 'audio/pcmu' } } } } }));
    up.send(JSON.stringify({ type: 'session.updated', session: { type: 'realtime', audio: { input: { format: { type: 'audio/pcmu' } } } } }), conn);
    await c.waitFor('session.updated');
    const minute = Buffer.alloc(480_000).toString('base64');
    for (let i = 0; i < 4; i++) c.ws.send(JSON.stringify({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_audio', audio: minute }] } }));
    c.ws.send('{"type":"response.create"}');
    await c.waitFor('response.output_text.done', 1, 15_000);
    c.ws.close(1000);
    await c.waitClose();
    const [row] = await ended(id);
    expect(row.audio_input_tokens).toBe(240 * 20);
    // Text: the formatting allowance, the session frames and the items' JSON without their audio.
    expect(row.input_tokens).toBeGreaterThan(OVERHEAD);
    expect(row.input_tokens).toBeLessThan(OVERHEAD + 2_000);
    expect(row.cost).toBe(costOf([[row.input_tokens, PRICE.input], [240 * 20, PRICE.audio_input], [7, PRICE.output]]));
    expect(row.cost).toBeGreaterThan(costOf([[240 * 10, PRICE.audio_input]]));
  }, 30_000);

  test('an item spelling its audio key twice: both strings count as audio (an upstream may keep the first)', async () => {
    up.stopBefore = 'response.done';
    up.echo = false;
    const { id, c } = await session(10_000_000);
    const second = Buffer.alloc(48_000).toString('base64'); // one second of PCM16 at 24 kHz
    c.ws.send(`{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_audio","audio":"${second}","audio":"AAAA"}]}}`);
    c.ws.send('{"type":"response.create"}');
    await c.waitFor('response.output_text.done');
    c.ws.close(1000);
    await c.waitClose();
    // 64,004 characters of base64: 48,003 bytes, just over a second, 21 tokens.
    expect((await ended(id)).map((r) => r.audio_input_tokens)).toEqual([21]);
  }, 20_000);

  test.each([
    ['an image', { type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_image', image_url: 'data:image/png;base64,iVBORw0KGgo=' }] } }],
    ['an escaped item reference', { type: 'response.create', response: { input: [{ type: 'item\u005freference', id: 'item_1' }] } }],
    ['a stored prompt', { type: 'session.update', session: { type: 'realtime', prompt: { id: 'pmpt_1' } } }],
  ])('content whose tokens its bytes do not bound (%s): the whole window at the dearer input price', async (_what, event) => {
    up.stopBefore = 'response.done';
    up.echo = false;
    const { id, c } = await session(10_000_000);
    // JSON.stringify leaves `_` unescaped: the escaped form is written by hand, as a client may.
    c.ws.send(JSON.stringify(event).replace('item_reference', 'item\\u005freference'));
    if (event.type !== 'response.create') c.ws.send('{"type":"response.create"}');
    await c.waitFor('response.output_text.done');
    c.ws.close(1000);
    await c.waitClose();
    const cost = costOf([[CTX, PRICE.audio_input], [7, PRICE.output]]);
    expect((await ended(id)).map((r) => [r.input_tokens, r.audio_input_tokens, r.cost, r.usage_flag])).toEqual([[0, CTX, cost, 'estimated']]);
  }, 20_000);
});

describe('input transcriptions the session ends before', () => {
  const tr = (type: string, item: string, extra: Record<string, unknown> = {}) => JSON.stringify({ type: `conversation.item.input_audio_transcription.${type}`, item_id: item, content_index: 0, ...extra });
  const committed = (item: string) => JSON.stringify({ type: 'input_audio_buffer.committed', previous_item_id: null, item_id: item });

  test('a committed item whose completion never arrives is billed on its audio; a failed one is not; the uncommitted tail is', async () => {
    up.echo = false;
    const { id, c, conn } = await session(10_000_000);
    // G.711 (8,000 bytes a second), named by the client: its audio is counted at that rate.
    c.ws.send(JSON.stringify({ type: 'session.update', session: { type: 'realtime', audio: { input: { format: { type: 'audio/pcmu' }, transcription: { model: 'gpt-4o-transcribe' } } } } }));
    up.send(JSON.stringify({ type: 'session.updated', session: { type: 'realtime', audio: { input: { format: { type: 'audio/pcmu' }, transcription: { model: 'gpt-4o-transcribe' } } } } }), conn);
    await c.waitFor('session.updated');
    const frames = [append(8_000), append(8_000), append(16_000), append(4_000)];
    // Each commit is read by the gateway (the client has it) before the next append: on PostgreSQL, upstream frames
    // wait behind a settlement's commit, and audio appended meanwhile would count with the earlier item.
    const step = async (n: number, ...events: string[]) => {
      c.ws.send(frames[n]!);
      await up.until(() => up.received.filter((r) => r.conn === conn).length === n + 2);
      for (const e of events) up.send(e, conn);
      if (events.length) await c.waitFor(JSON.parse(events.at(-1)!).type);
    };
    await step(0, committed('item_a'), tr('failed', 'item_a', { error: { type: 'transcription_error', code: 'audio_unintelligible', message: 'x' } }));
    await step(1, committed('item_b'), tr('completed', 'item_b', { transcript: 'hi', usage: { type: 'tokens', total_tokens: 26, input_tokens: 17, input_token_details: { text_tokens: 0, audio_tokens: 17 }, output_tokens: 9 } }));
    await step(2, committed('item_c'), tr('delta', 'item_c', { delta: 'hello there' }));
    await step(3);
    await c.waitFor('conversation.item.input_audio_transcription.delta');
    c.ws.close(1000);
    await c.waitClose();
    const rows = await ended(id);
    // item_c: two seconds (and its frame's JSON) at 10 audio tokens a second, its delta's 11 characters as 3 tokens.
    const c2 = Math.ceil((audioBytes([frames[2]!]) / 8_000) * 10);
    const tail = Math.ceil((audioBytes([frames[3]!]) / 8_000) * 10);
    expect([c2, tail]).toEqual([21, 6]);
    expect(rows.map((r) => [r.request_id.replace(/^rt_\w+?_/, ''), r.audio_input_tokens, r.output_tokens, r.cost, r.usage_flag, r.error_code])).toEqual([
      ['tr_item_b_0', 17, 9, costOf([[17, TR.audio_input], [9, TR.output]]), '', ''],
      ['tr_item_c_0', c2, 3, costOf([[c2, TR.audio_input], [3, TR.output]]), 'estimated', 'client_closed'],
      ['tr_uncommitted', tail, 0, costOf([[tail, TR.audio_input]]), 'estimated', 'client_closed'],
    ]);
    const total = rows.reduce((n, r) => n + r.cost, 0);
    expect(await gw.services.ledger.sum(id)).toBe(10_000_000 - total);
  }, 20_000);
  test('appends written another way (type last, type escaped) are the committed audio all the same', async () => {
    up.echo = false;
    const { id, c, conn } = await session(10_000_000);
    c.ws.send(JSON.stringify({ type: 'session.update', session: { type: 'realtime', audio: { input: { format: { type: 'audio/pcmu' }, transcription: { model: 'gpt-4o-transcribe' } } } } }));
    up.send(JSON.stringify({ type: 'session.updated', session: { type: 'realtime', audio: { input: { format: { type: 'audio/pcmu' }, transcription: { model: 'gpt-4o-transcribe' } } } } }), conn);
    await c.waitFor('session.updated');
    // Two seconds of G.711 each; the upstream reads both as appends.
    const b64 = Buffer.alloc(16_000).toString('base64');
    c.ws.send(JSON.stringify({ audio: b64, type: 'input_audio_buffer.append' }));
    c.ws.send(`{"type":"input_audio_buffer.\\u0061ppend","audio":"${b64}"}`);
    await up.until(() => up.received.filter((r) => r.conn === conn).length === 3);
    up.send(committed('item_r'), conn);
    await c.waitFor('input_audio_buffer.committed');
    c.ws.close(1000);
    await c.waitClose();
    // Four seconds at 10 audio tokens a second, from the audio strings alone (not the frames' JSON): each string's
    // length read as base64 is 16,002 bytes (its padding counted), so 4.0005 s, 41 tokens.
    expect((await ended(id)).map((r) => [r.request_id.replace(/^rt_\w+?_/, ''), r.audio_input_tokens, r.cost, r.usage_flag])).toEqual([
      ['tr_item_r_0', 41, costOf([[41, TR.audio_input]]), 'estimated'],
    ]);
  }, 20_000);
});
