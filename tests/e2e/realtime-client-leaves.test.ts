/**
 * A client that stops reading and leaves while its response runs: the gateway stopped reading the upstream (its
 * backpressure) while the upstream generated the whole response, which the upstream bills in full. Billed only on
 * what the gateway had read, such a client paid for a fraction of the audio the operator pays for. The gateway
 * cancels what still runs and reads the upstream's own report (for at most REALTIME_CLOSE_GRACE_MS) before closing it.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import type net from 'node:net';
import { nonReadingRealtimeClient } from '../helpers/non-reading-client';
import { makeUser, type TestGateway } from '../helpers/gateway';
import { startRealtimeGateway } from '../helpers/realtime-gateway';
import { SAMPLE_USAGE, type RealtimeUpstreamDouble, type UpstreamConnection } from '../doubles/realtime-upstream';

const PRICE = { model: 'gpt-realtime', input: 4_000_000, output: 16_000_000, cache_read: 400_000, cache_write: 0, audio_input: 32_000_000, audio_output: 64_000_000, context_window: 16_000 };
/** 8,000 audio tokens reported: 400 s of PCM16 24 kHz, 25.6 MB of base64 deltas. */
const AUDIO_TOKENS = 8000;
const GRACE = 1000;
const CHUNK = 'A'.repeat(64_000); // one second of audio as base64

let gw: TestGateway;
let up: RealtimeUpstreamDouble;

beforeAll(async () => {
  // Unthrottled, so the grace is spent reading, not waiting for the session's read budget (which still applies).
  ({ gw, up } = await startRealtimeGateway({ REALTIME_RESERVE_TOKENS: '16384', REALTIME_CLOSE_GRACE_MS: String(GRACE), REALTIME_READ_BYTES_PER_SECOND: '0' }, PRICE));
}, 30_000);
afterAll(async () => {
  await gw.stop();
  await up.stop();
});

/** A session of a new user with a balance, its client not reading, and its upstream connection. */
async function session(): Promise<{ userId: number; s: net.Socket; c: UpstreamConnection }> {
  const u = await makeUser(gw);
  await gw.services.ledger.apply({ userId: u.id, kind: 'topup', amount: 1_000_000_000, ref: `seed-${u.id}`, at: 1 });
  const key = (await gw.api('POST', '/api/token/', { name: 'rt' }, u.token)).body.data.key;
  const s = await nonReadingRealtimeClient(gw.nodeUrl, key);
  await up.until(() => up.connections.length > 0 && !up.connections.at(-1)!.closed && !!up.connections.at(-1)!.ws);
  return { userId: u.id, s, c: up.connections.at(-1)! };
}

/** The user's usage rows once its session record is written (after the session's last settlement). */
async function ended(userId: number): Promise<any[]> {
  for (let i = 0; i < 300; i++) {
    if (await gw.db.get('select 1 as x from realtime_sessions where user_id = ?', userId)) break;
    await Bun.sleep(20);
  }
  return gw.db.all('select request_id, output_tokens, audio_output_tokens, usage_flag, error_code from usage_logs where user_id = ? order by id', userId);
}

test('a client that stops reading and leaves mid-response is billed the output the upstream reports, not what the gateway had read', async () => {
  const { userId, s, c } = await session();
  const conn = c.id;
  up.usageFor = () => ({ ...SAMPLE_USAGE, total_tokens: 400 + AUDIO_TOKENS, output_tokens: AUDIO_TOKENS, output_token_details: { text_tokens: 0, audio_tokens: AUDIO_TOKENS } });
  // A response the upstream starts itself (server VAD): it generates 400 s of audio faster than real time, as OpenAI does, then reports it.
  const id = 'resp_manual';
  up.send(JSON.stringify({ type: 'response.created', response: { id, object: 'realtime.response', status: 'in_progress', output: [], max_output_tokens: 16384 } }), conn);
  for (let i = 0; i < AUDIO_TOKENS / 20; i++) up.send(JSON.stringify({ type: 'response.output_audio.delta', response_id: id, item_id: 'it', output_index: 0, content_index: 0, delta: CHUNK }), conn);
  up.send(JSON.stringify({ type: 'response.done', response: { id, object: 'realtime.response', status: 'completed', output: [], max_output_tokens: 16384, usage: up.usageFor(2) } }), conn);
  // The gateway stops reading the upstream: most of the audio (and the report) waits upstream.
  let unsent = up.unsent(conn);
  for (let i = 0; i < 100; i++) {
    await Bun.sleep(20);
    const now = up.unsent(conn);
    if (now === unsent) break;
    unsent = now;
  }
  expect(up.unsent(conn)).toBeGreaterThan(1_000_000);
  s.destroy();
  const rows = await ended(userId);
  expect(rows.length).toBe(1);
  expect(rows[0].request_id).toEndWith(id);
  expect(rows[0].audio_output_tokens).toBe(AUDIO_TOKENS);
  expect(rows[0].error_code).toBe('');
  // It was told to stop what still ran; nothing of it was relayed once the client had gone.
  expect(up.received.some((f) => f.conn === conn && String(f.data) === JSON.stringify({ type: 'response.cancel', response_id: id }))).toBe(true);
  up.usageFor = () => SAMPLE_USAGE;
}, 20_000);

test('a response the upstream never reports after the client left: the upstream is closed once the grace ends, the response billed as cut', async () => {
  const { userId, s, c } = await session();
  const id = 'resp_silent';
  up.send(JSON.stringify({ type: 'response.created', response: { id, object: 'realtime.response', status: 'in_progress', output: [], max_output_tokens: 100 } }), c.id);
  up.send(JSON.stringify({ type: 'response.output_text.delta', response_id: id, item_id: 'it', output_index: 0, content_index: 0, delta: 'Hello there' }), c.id);
  await Bun.sleep(100);
  const t0 = Date.now();
  s.destroy();
  // One the upstream starts after the client left (its turn detection on audio already sent) is cancelled too.
  await up.until(() => up.received.some((f) => f.conn === c.id && String(f.data).includes('response.cancel')));
  up.send(JSON.stringify({ type: 'response.created', response: { id: 'resp_late', object: 'realtime.response', status: 'in_progress', output: [], max_output_tokens: 100 } }), c.id);
  await up.until(() => c.closed !== null, GRACE + 2000);
  const waited = Date.now() - t0;
  const cancels = up.received.filter((f) => f.conn === c.id && String(f.data).includes('response.cancel')).map((f) => JSON.parse(String(f.data)).response_id);
  expect(cancels).toEqual([id, 'resp_late']);
  expect(waited).toBeGreaterThanOrEqual(GRACE - 50);
  expect(waited).toBeLessThan(GRACE + 1000);
  const rows = await ended(userId);
  expect(rows.map((r) => [r.request_id.split('_').at(-1), r.error_code])).toEqual([['silent', 'client_closed'], ['late', 'client_closed']]);
  expect(rows[0].output_tokens).toBeGreaterThan(0);
}, 20_000);

test('a client that leaves with nothing running: the upstream is closed at once', async () => {
  const { s, c } = await session();
  await Bun.sleep(50);
  const t0 = Date.now();
  s.destroy();
  await up.until(() => c.closed !== null, 2000);
  expect(Date.now() - t0).toBeLessThan(GRACE / 2);
}, 20_000);
