/**
 * Attack (hostile upstream): output deltas under response ids the upstream never announced, each id new. The gateway
 * kept every one open until the session's end (its output, to bill it unreserved there), so 20,000 such ids of 900
 * characters held 68 MB in one session, and the end billed 18,852 responses one after the other for 70 s, each on
 * the whole conversation bound, until the user's balance was gone. A session now ends (1011,
 * `upstream_protocol_error`) once more than MAX_OPEN_OUTPUTS responses have output and no report at once; what
 * they delivered is billed, once each. An upstream that names responses only in their output (no response.created),
 * one at a time, is unaffected: each is billed on its response.done. Real sockets, whole gateway, realtime double.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, type TestGateway } from '../helpers/gateway';
import { startRealtimeGateway } from '../helpers/realtime-gateway';
import { RealtimeTestClient, SAMPLE_USAGE, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';

const PRICE = { model: 'gpt-realtime', input: 4_000_000, output: 16_000_000, cache_read: 400_000, audio_input: 32_000_000, audio_output: 64_000_000, context_window: 16_000 };
/** libs/realtime/src/meter.ts MAX_OPEN_OUTPUTS. */
const MAX_OPEN = 64;
let gw: TestGateway;
let up: RealtimeUpstreamDouble;

beforeAll(async () => {
  ({ gw, up } = await startRealtimeGateway({}, PRICE));
}, 30_000);
afterAll(async () => {
  await gw.stop();
  await up.stop();
});

async function session() {
  const u = await makeUser(gw);
  await gw.services.ledger.apply({ userId: u.id, kind: 'topup', amount: 1_000_000_000, ref: `seed-${u.id}`, at: 1 });
  const key = (await gw.api('POST', '/api/token/', { name: 'rt' }, u.token)).body.data.key as string;
  const c = new RealtimeTestClient(`${gw.url.replace('http://', 'ws://')}/v1/realtime?model=gpt-realtime`, { headers: { authorization: `Bearer ${key}` } });
  await c.opened;
  await c.waitFor('session.created');
  return { c, conn: up.connections.at(-1)!.id, userId: u.id };
}

const delta = (id: string) => JSON.stringify({ type: 'response.output_text.delta', response_id: id, item_id: 'item_x', output_index: 0, content_index: 0, delta: 'hi' });
const done = (id: string) => JSON.stringify({ type: 'response.done', response: { id, object: 'realtime.response', status: 'completed', status_details: null, output: [], usage: SAMPLE_USAGE } });

async function rowsOf(userId: number): Promise<any[]> {
  for (let i = 0; i < 250; i++) {
    if (await gw.db.get('select 1 as x from realtime_sessions where user_id = ?', userId)) break;
    await Bun.sleep(20);
  }
  return gw.db.all('select request_id, error_code from usage_logs where user_id = ? order by id', userId);
}

test('output under hundreds of never-announced response ids ends the session; what was delivered is billed once per id', async () => {
  const { c, conn, userId } = await session();
  const n = 300;
  for (let i = 0; i < n; i++) up.send(delta(`resp_unannounced_${i}_${'x'.repeat(200)}`), conn);
  const closed = await c.waitClose(10_000);
  expect(closed.code).toBe(1011);
  const err = c.events().find((e) => e.type === 'error');
  expect(err?.error?.code).toBe('upstream_protocol_error');
  // Relayed up to the one past the bound, never the rest.
  const relayed = c.events().filter((e) => e.type === 'response.output_text.delta').length;
  expect(relayed).toBe(MAX_OPEN + 1);
  const rows = await rowsOf(userId);
  expect(rows.length).toBe(MAX_OPEN + 1);
  expect(new Set(rows.map((r) => r.request_id)).size).toBe(MAX_OPEN + 1);
  expect(up.connections.find((x) => x.id === conn)!.closed).not.toBeNull();
}, 30_000);

test('an upstream naming each response only in its output, one after another, is served for many more responses than the bound', async () => {
  const { c, conn, userId } = await session();
  const n = MAX_OPEN * 2;
  for (let i = 0; i < n; i++) {
    up.send(delta(`resp_seq_${i}`), conn);
    up.send(done(`resp_seq_${i}`), conn);
  }
  await c.waitFor('response.done', n, 10_000);
  expect(c.ws.readyState).toBe(WebSocket.OPEN);
  c.ws.close(1000);
  const rows = await rowsOf(userId);
  expect(rows.length).toBe(n);
  expect(rows.every((r) => !r.error_code)).toBe(true);
}, 30_000);

const transcribing = JSON.stringify({ type: 'session.updated', session: { type: 'realtime', model: 'gpt-realtime', audio: { input: { transcription: { model: 'gpt-realtime' } } } } });
const committed = (id: string) => JSON.stringify({ type: 'input_audio_buffer.committed', item_id: id, previous_item_id: null });
const transcribed = (id: string) => JSON.stringify({ type: 'conversation.item.input_audio_transcription.completed', item_id: id, content_index: 0, transcript: 'hi', usage: { type: 'tokens', total_tokens: 3, input_tokens: 1, output_tokens: 2 } });

test('commits of hundreds of items whose transcriptions are never reported end the session; each kept one is billed once', async () => {
  // Before: 20,000 such commits held 77 MB and the end wrote 20,000 usage rows for 8.4 s.
  const { c, conn, userId } = await session();
  up.send(transcribing, conn);
  const n = 300;
  for (let i = 0; i < n; i++) up.send(committed(`item_${i}_${'x'.repeat(200)}`), conn);
  const closed = await c.waitClose(10_000);
  expect(closed.code).toBe(1011);
  expect(c.events().find((e) => e.type === 'error')?.error?.code).toBe('upstream_protocol_error');
  expect(c.events().filter((e) => e.type === 'input_audio_buffer.committed').length).toBe(MAX_OPEN + 1);
  expect((await rowsOf(userId)).length).toBe(MAX_OPEN + 1);
}, 30_000);

test('transcriptions reported one after another are served for many more items than the bound', async () => {
  const { c, conn, userId } = await session();
  up.send(transcribing, conn);
  const n = MAX_OPEN * 2;
  for (let i = 0; i < n; i++) {
    up.send(committed(`item_seq_${i}`), conn);
    up.send(transcribed(`item_seq_${i}`), conn);
  }
  await c.waitFor('conversation.item.input_audio_transcription.completed', n, 10_000);
  expect(c.ws.readyState).toBe(WebSocket.OPEN);
  c.ws.close(1000);
  expect((await rowsOf(userId)).length).toBe(n);
}, 30_000);
