/**
 * /v1/realtime through the whole gateway (real services, keys, channels and prices created over the
 * management API): handshake auth both ways, every pre-upgrade error, billing, session records.
 * Socket mechanics in depth are in realtime-relay.test.ts.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { costOf } from '@gw/core';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfWindowEdge } from '../helpers/window-edge';
import { RealtimeTestClient, SAMPLE_USAGE, startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';

const PRICE = { model: 'gpt-realtime', input: 4_000_000, output: 16_000_000, cache_read: 400_000, cache_write: 0, audio_input: 32_000_000, audio_output: 64_000_000, context_window: 16_000 };
const UPGRADE = { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' };

let gw: TestGateway;
let up: RealtimeUpstreamDouble;
let wsBase: string;
let key: string;
let userId: number;
const clients: RealtimeTestClient[] = [];

async function channel(body: Record<string, unknown>): Promise<number> {
  const r = await gw.api('POST', '/api/channel/', { name: 'rt', type: 'openai', base_url: up.url, key: 'upstream-secret', timeout_ms: 5000, ...body });
  expect(r.status).toBe(200);
  return r.body.data.id;
}

async function keyedUser(balance: number, keyFields: Record<string, unknown> = {}): Promise<{ id: number; key: string; keyId: number; token: string }> {
  const u = await makeUser(gw);
  if (balance) await gw.services.ledger.apply({ userId: u.id, kind: 'topup', amount: balance, ref: `seed-${u.id}`, at: 1 });
  const r = await gw.api('POST', '/api/token/', { name: 'rt', ...keyFields }, u.token);
  expect(r.status).toBe(200);
  return { id: u.id, key: r.body.data.key, keyId: r.body.data.id, token: u.token };
}

const open = (path: string, opts: { headers?: Record<string, string>; protocols?: string[] }) => {
  const c = new RealtimeTestClient(wsBase + path, opts);
  clients.push(c);
  return c;
};

async function refused(path: string, headers: Record<string, string>, status: number, code: string, upgrade = true) {
  const res = await fetch(gw.url + path, { headers: { ...(upgrade ? UPGRADE : {}), ...headers }, signal: AbortSignal.timeout(2000) });
  const body: any = await res.json();
  expect({ status: res.status, code: body.error?.code }).toEqual({ status, code });
  expect(body.type).toBe('error');
  for (const f of ['message', 'type', 'param', 'code']) expect(typeof body.error[f]).toBe('string');
  expect(body.request_id).toBe(res.headers.get('request-id')!);
  return body;
}

beforeAll(async () => {
  up = startRealtimeUpstream();
  gw = await startGateway({ REALTIME_MAX_SESSIONS_PER_KEY: '2', REALTIME_DEFAULT_MODEL: 'gpt-realtime' });
  wsBase = gw.url.replace('http://', 'ws://');
  await channel({ models: ['gpt-realtime'], model_mapping: { 'gpt-realtime': 'gpt-realtime-2025-08-28' } });
  expect((await gw.api('PUT', '/api/pricing/', PRICE)).status).toBe(200);
  ({ key, id: userId } = await keyedUser(50_000_000));
});

afterAll(async () => {
  for (const c of clients) if (c.ws.readyState <= 1) c.ws.close();
  await gw.stop();
  await up.stop();
});

describe('/v1/realtime through the gateway', () => {
  test('Bearer key: relayed to the channel with its own key and the mapped model', async () => {
    const c = open('/v1/realtime?model=gpt-realtime', { headers: { authorization: `Bearer ${key}` } });
    await c.opened;
    expect((await c.waitFor('session.created')).session.model).toBe('gpt-realtime-2025-08-28');
    const conn = up.connections.at(-1)!;
    expect(conn.headers.authorization).toBe('Bearer upstream-secret');
    expect(JSON.stringify(conn.headers)).not.toContain(key);
    c.ws.close();
    await c.waitClose();
  });

  test('a key with a model allow-list may turn on input transcription only with a model of the list (session kept)', async () => {
    const limited = await keyedUser(1_000_000, { models: ['gpt-realtime', 'whisper-1'] });
    const c = open('/v1/realtime?model=gpt-realtime', { headers: { authorization: `Bearer ${limited.key}` } });
    await c.opened;
    await c.waitFor('session.created');
    const conn = up.connections.at(-1)!.id;
    c.ws.send(JSON.stringify({ type: 'session.update', session: { type: 'realtime', audio: { input: { transcription: { model: 'gpt-4o-transcribe' } } } } }));
    const err = await c.waitFor('error');
    expect(err.error).toMatchObject({ type: 'invalid_request_error', code: 'model_not_allowed' });
    expect(err.error.message).toContain('gpt-4o-transcribe');
    const ok = JSON.stringify({ type: 'session.update', session: { input_audio_transcription: { model: 'whisper-1' } } });
    c.ws.send(ok);
    await up.until(() => up.received.some((r) => r.conn === conn));
    await Bun.sleep(50);
    expect(up.received.filter((r) => r.conn === conn).map((r) => String(r.data))).toEqual([ok]);
    expect(c.close).toBeNull();
    c.ws.close();
    await c.waitClose();
  });

  test('an allow-list narrowed mid-session (model, then IP) refuses the open session\'s next response with 1008', async () => {
    for (const [change, code] of [[{ models: ['some-other-model'] }, 'model_not_allowed'], [{ allow_ips: ['10.1.2.3'] }, 'ip_not_allowed']] as const) {
      const k = await keyedUser(1_000_000);
      const c = open('/v1/realtime?model=gpt-realtime', { headers: { authorization: `Bearer ${k.key}` } });
      await c.opened;
      await c.waitFor('session.created');
      c.ws.send('{"type":"response.create"}');
      await c.waitFor('response.done');
      expect((await gw.api('PUT', '/api/token/', { id: k.keyId, ...change }, k.token)).status).toBe(200);
      const conn = up.connections.at(-1)!.id;
      const forwarded = up.received.filter((r) => r.conn === conn).length;
      c.ws.send('{"type":"response.create"}');
      expect((await c.waitClose()).code).toBe(1008);
      expect(c.events().at(-1).error).toMatchObject({ type: 'permission_error', code });
      // Refused before it reached the upstream: nothing more was forwarded, nothing more billed.
      expect(up.received.filter((r) => r.conn === conn).length).toBe(forwarded);
      let s: any = null;
      for (let i = 0; i < 150 && !s; i++) {
        s = await gw.db.get('select responses, close_code from realtime_sessions where user_id = ?', k.id);
        if (!s) await Bun.sleep(20);
      }
      expect(s).toEqual({ responses: 1, close_code: 1008 });
      expect((await gw.db.all('select status from usage_logs where user_id = ?', k.id)).length).toBe(1);
    }
  });

  test('browser subprotocol key: the handshake answers "realtime" and never echoes the key', async () => {
    const res = await fetch(`${gw.url}/v1/realtime`, { headers: { ...UPGRADE, 'sec-websocket-protocol': `realtime, openai-insecure-api-key.${key}` } });
    expect(res.status).toBe(101);
    expect(res.headers.get('sec-websocket-protocol')).toBe('realtime');
    for (const [, v] of res.headers) expect(v).not.toContain(key);
    await res.body?.cancel().catch(() => {});
    const c = open('/v1/realtime', { protocols: ['realtime', `openai-insecure-api-key.${key}`] });
    await c.opened;
    expect(c.ws.protocol).toBe('realtime');
    await c.waitFor('session.created');
    c.ws.close();
    await c.waitClose();
  });

  test('every failure before the upgrade is an HTTP JSON error', async () => {
    await refused('/v1/realtime', {}, 401, 'missing_api_key');
    await refused('/v1/realtime', { authorization: 'Bearer sk-not-a-key' }, 401, 'invalid_api_key');
    await refused('/v1/realtime', { 'sec-websocket-protocol': 'realtime, openai-insecure-api-key.sk-nope' }, 401, 'invalid_api_key');
    await refused('/v1/realtime', { authorization: `Bearer ${gw.rootToken}` }, 401, 'wrong_credential_kind');
    await refused('/v1/realtime', { authorization: `Bearer ${key}` }, 400, 'websocket_required', false);
    await refused('/v1/realtime?model=no-such-model', { authorization: `Bearer ${key}` }, 404, 'model_not_found');

    const limited = await keyedUser(1_000_000, { models: ['some-other-model'] });
    await refused('/v1/realtime?model=gpt-realtime', { authorization: `Bearer ${limited.key}` }, 403, 'model_not_allowed');
    const fenced = await keyedUser(1_000_000, { allow_ips: ['10.1.2.3'] });
    await refused('/v1/realtime?model=gpt-realtime', { authorization: `Bearer ${fenced.key}` }, 403, 'ip_not_allowed');
    const broke = await keyedUser(0);
    await refused('/v1/realtime?model=gpt-realtime', { authorization: `Bearer ${broke.key}` }, 402, 'quota_exhausted');

    const id = await channel({ name: 'rt-off', models: ['gpt-realtime-mini'] });
    expect((await gw.api('PUT', '/api/pricing/', { ...PRICE, model: 'gpt-realtime-mini' })).status).toBe(200);
    expect((await gw.api('PUT', '/api/channel/', { id, status: 2 })).status).toBe(200);
    await refused('/v1/realtime?model=gpt-realtime-mini', { authorization: `Bearer ${key}` }, 503, 'no_healthy_channel');
  });

  test('sessions per key are capped (REALTIME_MAX_SESSIONS_PER_KEY): 429 before the upgrade', async () => {
    const k = await keyedUser(1_000_000);
    const a = open('/v1/realtime', { headers: { authorization: `Bearer ${k.key}` } });
    const b = open('/v1/realtime', { headers: { authorization: `Bearer ${k.key}` } });
    await Promise.all([a.opened, b.opened]);
    await refused('/v1/realtime', { authorization: `Bearer ${k.key}` }, 429, 'too_many_sessions');
    a.ws.close();
    b.ws.close();
    await Promise.all([a.waitClose(), b.waitClose()]);
  });

  test('opening a session counts toward the key requests-per-minute limit (429 key_rpm_exceeded, slot given back)', async () => {
    const k = await keyedUser(1_000_000, { rate_limit_rpm: 1 });
    await clearOfWindowEdge();
    const a = open('/v1/realtime', { headers: { authorization: `Bearer ${k.key}` } });
    await a.opened;
    await refused('/v1/realtime', { authorization: `Bearer ${k.key}` }, 429, 'key_rpm_exceeded');
    a.ws.close();
    await a.waitClose();
    // The refused opening did not keep a session slot: the per-key session count goes back to zero. Polled:
    // the client can see its close handshake finish before the server's close handler has run.
    await up.until(() => gw.services.realtime.liveCount === 0);
    expect(gw.services.realtime.liveCount).toBe(0);
  }, 30_000);

  test('responses are billed from response.done; usage log and session record are written', async () => {
    const k = await keyedUser(10_000_000);
    const c = open('/v1/realtime?model=gpt-realtime', { headers: { authorization: `Bearer ${k.key}` } });
    await c.opened;
    c.ws.send('{"type":"response.create"}');
    c.ws.send('{"type":"response.create"}');
    await c.waitFor('response.done', 2);
    c.ws.close(1000, 'bye');
    await c.waitClose();
    const expected = costOf([[16, PRICE.input], [128, PRICE.audio_input], [256, PRICE.cache_read], [30, PRICE.output], [82, PRICE.audio_output]]);
    expect(SAMPLE_USAGE.input_tokens).toBe(400);
    const logs = await gw.db.all('select kind, cost, model, upstream_model from usage_logs where user_id = ? order by id', k.id);
    expect(logs).toEqual([1, 2].map(() => ({ kind: 'realtime', cost: expected, model: 'gpt-realtime', upstream_model: 'gpt-realtime-2025-08-28' })));
    expect(await gw.services.ledger.sum(k.id)).toBe(10_000_000 - 2 * expected);
    const keyRow = await gw.db.get('select used_quota from api_keys where id = (select max(id) from api_keys where user_id = ?)', k.id);
    expect(keyRow.used_quota).toBe(2 * expected);
    // The session record is written once the session has ended (after its last commit).
    let s: unknown = null;
    for (let i = 0; i < 150 && !s; i++) {
      s = await gw.db.get('select responses, cost, close_code, close_reason, frames_in from realtime_sessions where user_id = ?', k.id);
      if (!s) await Bun.sleep(20);
    }
    expect(s).toEqual({ responses: 2, cost: 2 * expected, close_code: 1000, close_reason: 'bye', frames_in: 2 });
    const listed = await gw.api('GET', '/api/log/self?page_size=50', undefined, k.token);
    expect(listed.status).toBe(200);
    expect(listed.body.data.items.map((i: any) => [i.kind, i.cost])).toEqual([['realtime', expected], ['realtime', expected]]);
  });
});
