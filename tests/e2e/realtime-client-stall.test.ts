/**
 * A client that is gone without the gateway being told (it stopped reading, then half-closed through a proxy, or just
 * vanished) must not hold its session, key slot, upstream and running response until Bun's default idle timeout
 * (120 s). While frames wait for it, one that takes none for REALTIME_CLIENT_STALL_MS is treated as gone; one nothing is
 * sent to is closed by REALTIME_IDLE_TIMEOUT_SECONDS unless it answers Bun's pings, as a live but quiet client does.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { nonReadingRealtimeClient } from '../helpers/non-reading-client';
import { makeUser, type TestGateway } from '../helpers/gateway';
import { startRealtimeGateway } from '../helpers/realtime-gateway';
import { RealtimeTestClient, SAMPLE_USAGE, type RealtimeUpstreamDouble, type UpstreamConnection } from '../doubles/realtime-upstream';

const PRICE = { model: 'gpt-realtime', input: 4_000_000, output: 16_000_000, cache_read: 400_000, cache_write: 0, audio_input: 32_000_000, audio_output: 64_000_000, context_window: 16_000 };
const AUDIO_TOKENS = 8000;
const STALL = 1000;
// Long enough to read the ~25 MB backlog to its response.done on a loaded machine (it ends as soon as that is read).
const GRACE = 3000;
/** Bun's smallest idle timeout (1 to 7 round up to 8). */
const IDLE = 8;
const CHUNK = 'A'.repeat(64_000);

let gw: TestGateway;
let up: RealtimeUpstreamDouble;

beforeAll(async () => {
  ({ gw, up } = await startRealtimeGateway({ REALTIME_RESERVE_TOKENS: '16384', REALTIME_CLOSE_GRACE_MS: String(GRACE), REALTIME_CLIENT_STALL_MS: String(STALL),
    REALTIME_IDLE_TIMEOUT_SECONDS: String(IDLE), REALTIME_READ_BYTES_PER_SECOND: '0', REALTIME_MAX_SESSIONS_PER_KEY: '1' }, PRICE));
}, 30_000);
afterAll(async () => {
  await gw.stop();
  await up.stop();
});

async function userKey(): Promise<{ userId: number; key: string }> {
  const u = await makeUser(gw);
  await gw.services.ledger.apply({ userId: u.id, kind: 'topup', amount: 1_000_000_000, ref: `seed-${u.id}`, at: 1 });
  return { userId: u.id, key: (await gw.api('POST', '/api/token/', { name: 'rt' }, u.token)).body.data.key };
}

/** The upstream connection opened after the `before` ones. */
async function upstreamOf(before: number): Promise<UpstreamConnection> {
  await up.until(() => up.connections.length > before && !!up.connections.at(-1)!.ws);
  return up.connections.at(-1)!;
}

async function sessionRow(userId: number, ms: number): Promise<any> {
  for (const end = Date.now() + ms; Date.now() < end; await Bun.sleep(20)) {
    const r = await gw.db.get('select close_code, close_reason from realtime_sessions where user_id = ?', userId);
    if (r) return r;
  }
  return null;
}

const wsUrl = () => `${gw.nodeUrl.replace(/^http/, 'ws')}/v1/realtime?model=gpt-realtime`;

/** Starts a 400 s audio response upstream, faster than real time, and its report; returns once the gateway stopped reading it. */
async function flood(conn: number, id: string): Promise<void> {
  up.usageFor = () => ({ ...SAMPLE_USAGE, total_tokens: 400 + AUDIO_TOKENS, output_tokens: AUDIO_TOKENS, output_token_details: { text_tokens: 0, audio_tokens: AUDIO_TOKENS } });
  up.send(JSON.stringify({ type: 'response.created', response: { id, object: 'realtime.response', status: 'in_progress', output: [], max_output_tokens: 16384 } }), conn);
  for (let i = 0; i < AUDIO_TOKENS / 20; i++) up.send(JSON.stringify({ type: 'response.output_audio.delta', response_id: id, item_id: 'it', output_index: 0, content_index: 0, delta: CHUNK }), conn);
  up.send(JSON.stringify({ type: 'response.done', response: { id, object: 'realtime.response', status: 'completed', output: [], max_output_tokens: 16384, usage: up.usageFor(1) } }), conn);
}

for (const how of ['half-closes', 'stays connected'] as const) {
  test(`a client that stops reading mid-response and ${how}: the session ends within the stall limit and the grace, billed in full, its slot free`, async () => {
    const { userId, key } = await userKey();
    const n = up.connections.length;
    const s = await nonReadingRealtimeClient(gw.nodeUrl, key);
    s.on('error', () => {});
    const c = await upstreamOf(n);
    await flood(c.id, 'resp_stall');
    await up.until(() => up.unsent(c.id) > 1_000_000, 5000);
    const t0 = Date.now();
    if (how === 'half-closes') s.end(); // FIN, still not reading
    await up.until(() => c.closed !== null, STALL + GRACE + 5000);
    const took = Date.now() - t0;
    expect(took).toBeLessThan(STALL + GRACE + 2500);
    const row = await sessionRow(userId, 3000);
    expect(row.close_code).toBe(1006);
    // Bun may notice the FIN itself (connection lost); a client that stays connected is noticed by the stall limit.
    if (how === 'half-closes') expect(row.close_reason).toMatch(/^client (stopped reading|connection lost)$/);
    else expect(row.close_reason).toBe('client stopped reading');
    const usage = await gw.db.all('select request_id, audio_output_tokens, error_code from usage_logs where user_id = ?', userId);
    expect(usage.map((r: any) => [r.request_id.split('_').at(-1), r.audio_output_tokens, r.error_code])).toEqual([['stall', AUDIO_TOKENS, '']]);
    // The key's only slot (REALTIME_MAX_SESSIONS_PER_KEY=1) is free again.
    const again = new RealtimeTestClient(wsUrl(), { headers: { Authorization: `Bearer ${key}` } });
    await again.opened;
    again.ws.close();
    await again.waitClose();
    s.destroy();
    up.usageFor = () => SAMPLE_USAGE;
  }, 20_000);
}

test('a client that reads the whole flood at its own pace is not cut by the stall limit', async () => {
  const { userId, key } = await userKey();
  const n = up.connections.length;
  const cl = new RealtimeTestClient(wsUrl(), { headers: { Authorization: `Bearer ${key}` } });
  await cl.opened;
  const c = await upstreamOf(n);
  await flood(c.id, 'resp_read');
  await cl.waitFor('response.done', 1, 15_000);
  expect(cl.close).toBeNull();
  expect(c.closed).toBeNull();
  cl.ws.close();
  await cl.waitClose();
  expect((await sessionRow(userId, 3000)).close_reason).not.toBe('client stopped reading');
  up.usageFor = () => SAMPLE_USAGE;
}, 20_000);

test('an event loop held longer than the stall limit does not cut a client that is behind: the limit counts checks, not the clock', async () => {
  const { userId, key } = await userKey();
  const n = up.connections.length;
  const s = await nonReadingRealtimeClient(gw.nodeUrl, key);
  s.on('error', () => {});
  const c = await upstreamOf(n);
  await flood(c.id, 'resp_held');
  await up.until(() => up.unsent(c.id) > 1_000_000, 5000);
  // Long enough for the gateway's queue to the client to back up, well under the limit.
  await Bun.sleep(200);
  // The gateway (this process) is held past the limit, as a long GC or a loaded machine may hold it; the client,
  // behind but alive, reads as soon as the loop runs again.
  const until = Date.now() + STALL + 500;
  while (Date.now() < until) { /* held */ }
  // The client's first read comes a moment after the loop runs again (a check falls due at once).
  await Bun.sleep(100);
  s.on('data', () => {});
  s.resume();
  for (let i = 0; i < 300 && !(await gw.db.get('select 1 from usage_logs where user_id = ?', userId)); i++) await Bun.sleep(20);
  expect(c.closed).toBeNull();
  const usage = await gw.db.all('select request_id, audio_output_tokens, error_code from usage_logs where user_id = ?', userId);
  expect(usage.map((r: any) => [r.request_id.split('_').at(-1), r.audio_output_tokens, r.error_code])).toEqual([['held', AUDIO_TOKENS, '']]);
  s.destroy();
  up.usageFor = () => SAMPLE_USAGE;
}, 20_000);

test('a client gone silent (nothing sent to it, answering no ping) is closed after the idle timeout; a quiet live one stays', async () => {
  const gone = await userKey();
  const quiet = await userKey();
  const t0 = Date.now();
  const n0 = up.connections.length;
  const s = await nonReadingRealtimeClient(gw.nodeUrl, gone.key);
  s.on('error', () => {});
  const goneUp = await upstreamOf(n0);
  const n = up.connections.length;
  const cl = new RealtimeTestClient(wsUrl(), { headers: { Authorization: `Bearer ${quiet.key}` } });
  await cl.opened;
  const quietUp = await upstreamOf(n);
  expect(quietUp).not.toBe(goneUp);
  await up.until(() => goneUp.closed !== null, 3 * IDLE * 1000);
  const took = Date.now() - t0;
  // Bun checks its timeouts every few seconds: the bound is the point, not the exact moment.
  expect(took).toBeGreaterThanOrEqual(IDLE * 1000 / 2);
  expect(took).toBeLessThan(2 * IDLE * 1000 + 1000);
  expect(await sessionRow(gone.userId, 3000)).toEqual({ close_code: 1006, close_reason: 'WebSocket timed out from inactivity' });
  // The quiet client said nothing either, for longer than the idle timeout, yet answered Bun's pings: still relayed.
  await Bun.sleep(Math.max(0, 2 * IDLE * 1000 + 1000 - (Date.now() - t0)));
  expect(cl.close).toBeNull();
  expect(quietUp.closed).toBeNull();
  cl.ws.send(JSON.stringify({ type: 'conversation.item.retrieve', item_id: 'x', event_id: 'still-here' }));
  await up.until(() => up.received.some((f) => f.conn === quietUp.id && String(f.data).includes('still-here')));
  cl.ws.close();
  await cl.waitClose();
  s.destroy();
}, 60_000);
