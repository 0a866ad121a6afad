/**
 * Realtime responses that never reach response.done, and holds matched to their responses, through the
 * whole gateway over real sockets: a response cut by the client or the upstream is billed once on what it
 * delivered (flagged `estimated`, the cause as its error code); a hold whose response never started is
 * given back; a server-VAD response never takes a client's smaller hold.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'bun:test';
import { costOf } from '@gw/core';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { RealtimeTestClient, startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';
import { availableOf } from './relay-setup';

const CTX = 16_000;
const PRICE = { model: 'gpt-realtime', input: 4_000_000, output: 16_000_000, cache_read: 400_000, cache_write: 0, audio_input: 32_000_000, audio_output: 64_000_000, context_window: CTX };

let gw: TestGateway;
let up: RealtimeUpstreamDouble;
const clients: RealtimeTestClient[] = [];

beforeAll(async () => {
  up = startRealtimeUpstream();
  gw = await startGateway({ REALTIME_DEFAULT_MODEL: 'gpt-realtime' });
  const ch = await gw.api('POST', '/api/channel/', { name: 'rt', type: 'openai', base_url: up.url, key: 'upstream-secret', timeout_ms: 5000, models: ['gpt-realtime'] });
  expect(ch.status).toBe(200);
  expect((await gw.api('PUT', '/api/pricing/', PRICE)).status).toBe(200);
});
afterEach(() => {
  up.stopBefore = null;
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
  return gw.db.all('select request_id, input_tokens, output_tokens, audio_output_tokens, cost, usage_flag, error_code from usage_logs where user_id = ? order by id', userId);
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
    // No input estimate exists for a realtime response: the hold's input bound (the context window) is billed.
    // The deltas "Hello", " from", " the double" estimate 2 + 2 + 3 tokens (4 characters a token, each rounded up).
    const cost = costOf([[CTX, PRICE.input], [7, PRICE.output]]);
    expect(rows).toEqual([{ request_id: expect.stringMatching(/^rt_\w+_resp_\d+$/), input_tokens: CTX, output_tokens: 7, audio_output_tokens: 0, cost, usage_flag: 'estimated', error_code: 'client_closed' }]);
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
    const cost = costOf([[CTX, PRICE.input], [10, PRICE.output], [40, PRICE.audio_output]]);
    expect(rows).toEqual([{ request_id: expect.stringMatching(/_resp_vad$/), input_tokens: CTX, output_tokens: 10, audio_output_tokens: 40, cost, usage_flag: 'estimated', error_code: 'upstream_disconnected' }]);
    expect(await gw.services.ledger.sum(id)).toBe(10_000_000 - cost);
    await noHolds(id, 10_000_000 - cost);
  }, 20_000);

  test('a response.create never answered (no response.created, no output): its hold is given back, nothing billed', async () => {
    up.stopBefore = 'response.created';
    const { id, c } = await session(10_000_000);
    c.ws.send('{"type":"response.create"}');
    await up.until(() => up.received.some((f) => String(f.data).includes('response.create')));
    c.ws.close(1000);
    await c.waitClose();
    expect(await ended(id)).toEqual([]);
    await noHolds(id, 10_000_000);
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
});

describe('holds matched to their responses', () => {
  test('a server-VAD response started while a 1-token response.create waits is billed at its own limit; the refused create gives its hold back', async () => {
    up.stopBefore = 'response.created'; // the upstream answers the client's create only with the error below
    const { id, c, conn } = await session(10_000_000);
    c.ws.send('{"type":"response.create","event_id":"evt_tiny","response":{"max_output_tokens":1}}');
    await up.until(() => up.received.some((f) => String(f.data).includes('evt_tiny')));
    up.send('{"type":"response.created","response":{"id":"resp_vad2","status":"in_progress","max_output_tokens":"inf"}}', conn);
    up.send(JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', code: 'conversation_already_has_active_response', message: 'Conversation already has an active response', param: null, event_id: 'evt_tiny' } }), conn);
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
