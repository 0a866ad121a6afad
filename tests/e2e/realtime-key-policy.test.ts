/**
 * A realtime session under a key changed while it is admitted or running: a revocation landing while the admission
 * awaits (the shared store, in PostgreSQL mode) refuses the opening; an allow-list narrowed mid-session ends a
 * session that only transcribes (no response ever re-checks the key there) at its next client event, and an unchanged
 * key is not authorized again per event; a limited key or a budget spent by transcriptions ends the session, a limited
 * key raised mid-session bills them whole; openings count toward rpm on every node.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { costOf } from '@gw/core';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfWindowEdge } from '../helpers/window-edge';
import { RealtimeTestClient, startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';

const PRICE = { model: 'gpt-realtime', input: 4_000_000, output: 16_000_000, cache_read: 400_000, cache_write: 0, audio_input: 32_000_000, audio_output: 64_000_000, context_window: 16_000 };
const UPGRADE = { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' };
const APPEND = '{"type":"input_audio_buffer.append","audio":"AAAAAAAA"}';
/** What admission checks the key can cover: one response at the default max output (4,096). */
const RESERVE = costOf([[PRICE.context_window, PRICE.audio_input], [4096, PRICE.audio_output]]);
/** A transcription reporting the whole context window of audio. */
const BIG = { type: 'tokens', total_tokens: 16_000, input_tokens: 16_000, input_token_details: { text_tokens: 0, audio_tokens: 16_000 }, output_tokens: 0 };

let gw: TestGateway;
let up: RealtimeUpstreamDouble;
const clients: RealtimeTestClient[] = [];

async function keyedUser(fields: Record<string, unknown> = {}) {
  const u = await makeUser(gw);
  await gw.services.ledger.apply({ userId: u.id, kind: 'topup', amount: 5_000_000, ref: `seed-${u.id}`, at: 1 });
  const r = await gw.api('POST', '/api/token/', { name: 'rt', ...fields }, u.token);
  expect(r.status).toBe(200);
  return { id: u.id, key: r.body.data.key as string, keyId: r.body.data.id as number, token: u.token };
}

const open = (base: string, key: string) => {
  const c = new RealtimeTestClient(`${base.replace('http', 'ws')}/v1/realtime?model=gpt-realtime`, { headers: { authorization: `Bearer ${key}` } });
  clients.push(c);
  return c;
};

/** A session of `key` (through `base`) transcribing with whisper-1 (a beta transcription session, server VAD), as the upstream confirmed. */
async function transcribing(key: string, base = gw.url) {
  const c = open(base, key);
  await c.opened;
  await c.waitFor('session.created');
  const conn = up.connections.at(-1)!.id;
  const tr = { input_audio_transcription: { model: 'whisper-1' }, turn_detection: { type: 'server_vad' } };
  c.ws.send(JSON.stringify({ type: 'transcription_session.update', session: tr }));
  up.send(JSON.stringify({ type: 'transcription_session.updated', event_id: 'ev_tsu', session: { object: 'realtime.transcription_session', ...tr } }), conn);
  await c.waitFor('transcription_session.updated');
  return { c, conn };
}

/** A transcribing session of `key` whose upstream reports two transcriptions of the whole window, then closed by the gateway with 1008. */
async function twoWholeWindowTranscriptions(key: string) {
  const { c, conn } = await transcribing(key);
  for (const [n, item] of ['item_1', 'item_2'].entries()) {
    up.send(JSON.stringify({ type: 'conversation.item.input_audio_transcription.completed', event_id: `ev_${item}`, item_id: item, content_index: 0, transcript: 'hi', usage: BIG }), conn);
    await c.waitFor('conversation.item.input_audio_transcription.completed', n + 1);
  }
  expect((await c.waitClose()).code).toBe(1008);
  return c;
}

/** The user's session record, written once the session's last settlement has committed. */
async function sessionRecord(userId: number): Promise<any> {
  for (let i = 0; i < 150; i++) {
    const r = await gw.db.get('select close_code, cost from realtime_sessions where user_id = ?', userId);
    if (r) return r;
    await Bun.sleep(20);
  }
  throw new Error('no session record');
}

/** Holds node 1's next call of `obj[name]` once it has answered, until `release()`: a write made meanwhile lands inside that step. */
function holdAfter(obj: any, name: string) {
  const real = obj[name];
  let release!: () => void;
  const gate = new Promise<void>((r) => { release = r; });
  let entered!: () => void;
  const reached = new Promise<void>((r) => { entered = r; });
  obj[name] = function (...args: unknown[]) {
    obj[name] = real;
    return Promise.resolve(real.apply(this, args)).then(async (v) => { entered(); await gate; return v; });
  };
  return { reached, release };
}

beforeAll(async () => {
  up = startRealtimeUpstream();
  gw = await startGateway({ REALTIME_MAX_SESSIONS_PER_KEY: '0' });
  const ch = await gw.api('POST', '/api/channel/', { name: 'rt', type: 'openai', base_url: up.url, key: 'upstream-secret', timeout_ms: 5000, models: ['gpt-realtime'] });
  expect(ch.status).toBe(200);
  expect((await gw.api('PUT', '/api/pricing/', PRICE)).status).toBe(200);
});

afterAll(async () => {
  for (const c of clients) if (c.ws.readyState <= 1) c.ws.close();
  await gw.stop();
  await up.stop();
});

describe('realtime sessions follow their key', () => {
  test('a key deleted, disabled or narrowed while its session is being admitted gets the HTTP refusal, not a session', async () => {
    const cases = [['delete', 401, 'api_key_revoked'], [{ status: 2 }, 401, 'api_key_disabled'], [{ models: ['some-other-model'] }, 403, 'model_not_allowed']] as const;
    for (const [change, status, code] of cases) {
      const k = await keyedUser({ rate_limit_rpm: 5 });
      const held = holdAfter(gw.services.realtime, 'admit');
      const res = fetch(`${gw.nodeUrl}/v1/realtime?model=gpt-realtime`, { headers: { ...UPGRADE, authorization: `Bearer ${k.key}` }, signal: AbortSignal.timeout(5000) });
      await held.reached;
      const w = change === 'delete'
        ? await gw.api('DELETE', `/api/token/${k.keyId}`, undefined, k.token)
        : await gw.api('PUT', '/api/token/', { id: k.keyId, ...change }, k.token);
      expect(w.status).toBe(200);
      // Node 1 has the change (the helper waits for the feed in cluster mode) before its admission goes on.
      held.release();
      const r = await res;
      const body: any = r.status === 101 ? null : await r.json();
      expect({ status: r.status, code: body?.error?.code }).toEqual({ status, code });
      await up.until(() => gw.services.realtime.liveCount === 0);
    }
  });

  test('an allow-list narrowed after the limits passed and before the socket opened: the session ends at once (1008), before any event', async () => {
    const k = await keyedUser();
    const held = holdAfter(gw.services.relay.limiter, 'admit');
    const c = open(gw.nodeUrl, k.key);
    await held.reached;
    expect((await gw.api('PUT', '/api/token/', { id: k.keyId, models: ['some-other-model'] }, k.token)).status).toBe(200);
    held.release();
    expect((await c.waitClose()).code).toBe(1008);
    expect(c.events().at(-1)?.error).toMatchObject({ type: 'permission_error', code: 'model_not_allowed' });
  });

  test('an allow-list narrowed mid-session ends a transcription session at its next audio (1008, not forwarded); a transcription done is billed', async () => {
    const cases = [
      [{ models: ['gpt-realtime'] }, 'model_not_allowed'], // the transcription model taken off the list
      [{ models: ['some-other-model', 'whisper-1'] }, 'model_not_allowed'], // the session's model
      [{ allow_ips: ['10.1.2.3'] }, 'ip_not_allowed'],
    ] as const;
    for (const [change, code] of cases) {
      const k = await keyedUser({ models: ['gpt-realtime', 'whisper-1'] });
      const { c, conn } = await transcribing(k.key);
      c.ws.send(APPEND);
      await up.until(() => up.received.filter((r) => r.conn === conn).length === 2);
      expect((await gw.api('PUT', '/api/token/', { id: k.keyId, ...change }, k.token)).status).toBe(200);
      // Work the upstream did before is billed all the same.
      up.send(JSON.stringify({ type: 'conversation.item.input_audio_transcription.completed', event_id: 'ev_c', item_id: 'item_1', content_index: 0, transcript: 'hi',
        usage: { type: 'tokens', total_tokens: 12, input_tokens: 10, input_token_details: { text_tokens: 0, audio_tokens: 10 }, output_tokens: 2 } }), conn);
      await c.waitFor('conversation.item.input_audio_transcription.completed');
      c.ws.send(APPEND);
      expect((await c.waitClose()).code).toBe(1008);
      expect(c.events().at(-1).error).toMatchObject({ type: 'permission_error', code });
      expect(up.received.filter((r) => r.conn === conn).length).toBe(2);
      // The session's record is written after its last settlement commits.
      expect((await sessionRecord(k.id)).close_code).toBe(1008);
      const rows = await gw.db.all("select request_id, cost from usage_logs where user_id = ? and kind = 'realtime' order by id", k.id);
      // The audio appended since the last commit, which server VAD may have committed unseen, is billed as an estimate.
      expect(rows.map((r) => r.request_id.replace(/^rt_\w+?_/, ''))).toEqual(['tr_item_1_0', 'tr_uncommitted']);
      expect(rows[0].cost).toBeGreaterThan(0);
    }
  });

  test('the key is authorized again only once it changes: 200 audio appends do not run the allow-lists 200 times', async () => {
    const ips = [...Array.from({ length: 254 }, (_, i) => `10.${i}.0.0/16`), '0.0.0.0/0', '::/0'];
    const k = await keyedUser({ allow_ips: ips });
    const gate = gw.services.relay.gate as any;
    const real = gate.authorize;
    let calls = 0;
    gate.authorize = function (...args: unknown[]) { calls++; return real.apply(this, args); };
    try {
      // On node 1, whose gate is watched.
      const { c, conn } = await transcribing(k.key, gw.nodeUrl);
      const before = calls;
      for (let i = 0; i < 200; i++) c.ws.send(APPEND);
      await up.until(() => up.received.filter((r) => r.conn === conn).length === 201);
      // Before, each client event ran the key's whole policy (its 256 ranges against the address).
      expect(calls - before).toBeLessThanOrEqual(1);
      // A change is still seen at the next event.
      expect((await gw.api('PUT', '/api/token/', { id: k.keyId, allow_ips: ['10.1.2.3'] }, k.token)).status).toBe(200);
      c.ws.send(APPEND);
      expect((await c.waitClose()).code).toBe(1008);
      expect(c.events().at(-1).error).toMatchObject({ type: 'permission_error', code: 'ip_not_allowed' });
    } finally {
      gate.authorize = real;
    }
  });

  test('a limited key spent by transcriptions ends its session (1008 key_quota_exhausted): no transcription runs free past it', async () => {
    // The key holds a little more than admission needs, and two transcriptions spend it.
    const remain = RESERVE + 1_000;
    const k = await keyedUser({ unlimited_quota: false, remain_quota: remain });
    const c = await twoWholeWindowTranscriptions(k.key);
    expect(c.events().at(-1).error).toMatchObject({ type: 'billing_error', code: 'key_quota_exhausted' });
    const record = await sessionRecord(k.id);
    // The key paid exactly what it held, never more: the second transcription capped at what was left.
    const one = costOf([[16_000, PRICE.audio_input]]);
    expect(record.cost).toBe(remain);
    expect(await gw.db.all("select cost from usage_logs where user_id = ? and kind = 'realtime' order by id", k.id)).toEqual([{ cost: one }, { cost: remain - one }]);
    expect((await gw.db.get('select remain_quota from api_keys where id = ?', k.keyId)).remain_quota).toBe(0);
  });

  test('a limited key raised mid-session: its transcriptions are billed whole against the new remain_quota, the session goes on', async () => {
    const remain = RESERVE + 1_000;
    const k = await keyedUser({ unlimited_quota: false, remain_quota: remain });
    const { c, conn } = await transcribing(k.key);
    expect((await gw.api('PUT', '/api/token/', { id: k.keyId, unlimited_quota: false, remain_quota: 10 * remain }, k.token)).status).toBe(200);
    for (const [n, item] of ['item_1', 'item_2'].entries()) {
      up.send(JSON.stringify({ type: 'conversation.item.input_audio_transcription.completed', event_id: `ev_${item}`, item_id: item, content_index: 0, transcript: 'hi', usage: BIG }), conn);
      await c.waitFor('conversation.item.input_audio_transcription.completed', n + 1);
    }
    const one = costOf([[16_000, PRICE.audio_input]]);
    const rows = () => gw.db.all("select cost from usage_logs where user_id = ? and kind = 'realtime' order by id", k.id);
    for (let i = 0; i < 150 && (await rows()).length < 2; i++) await Bun.sleep(20);
    // Before, the cap read the remain_quota seen at admission: the second was capped and the session ended key_quota_exhausted.
    expect(await rows()).toEqual([{ cost: one }, { cost: one }]);
    expect(c.ws.readyState).toBe(WebSocket.OPEN);
    c.ws.close();
    await up.until(() => gw.services.realtime.liveCount === 0);
    expect((await gw.db.get('select remain_quota from api_keys where id = ?', k.keyId)).remain_quota).toBe(10 * remain - 2 * one);
  });

  test('a budget used up by transcriptions ends the session (1008 budget_exceeded) instead of spending past it while it runs', async () => {
    const k = await keyedUser();
    expect((await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: k.keyId, period: 'daily', limit: RESERVE + 1_000 }, k.token)).status).toBe(200);
    const c = await twoWholeWindowTranscriptions(k.key);
    expect(c.events().at(-1).error).toMatchObject({ type: 'billing_error', code: 'budget_exceeded' });
    // A charge without a hold is not lowered by a budget (README, Budgets): both are billed whole, and nothing after.
    expect((await sessionRecord(k.id)).cost).toBe(2 * costOf([[16_000, PRICE.audio_input]]));
  });

  test('a response refused for a spent key budget, key quota or user budget gets the code /v1/messages answers, and the session stays', async () => {
    // Each limit covers exactly admission's trial hold: a response asking for twice the output is refused.
    const cases = [
      ['key_budget_exceeded', async (k: Awaited<ReturnType<typeof keyedUser>>) => gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: k.keyId, period: 'daily', limit: RESERVE }, k.token)],
      ['user_budget_exceeded', async (k: Awaited<ReturnType<typeof keyedUser>>) => gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: k.id, period: 'daily', limit: RESERVE })],
      ['key_quota_exhausted', async (k: Awaited<ReturnType<typeof keyedUser>>) => gw.api('PUT', '/api/token/', { id: k.keyId, unlimited_quota: false, remain_quota: RESERVE }, k.token)],
    ] as const;
    for (const [code, limit] of cases) {
      const k = await keyedUser();
      expect((await limit(k)).status).toBe(200);
      const c = open(gw.url, k.key);
      await c.opened;
      await c.waitFor('session.created');
      c.ws.send('{"type":"response.create","response":{"max_output_tokens":8192}}');
      const refused = await c.waitFor('error');
      expect({ code, error: refused.error }).toMatchObject({ code, error: { type: 'billing_error', code } });
      // Refused, not ended: a response within the limit still runs.
      c.ws.send('{"type":"response.create"}');
      await c.waitFor('response.done');
      expect(c.ws.readyState).toBe(WebSocket.OPEN);
      c.ws.close();
    }
    await up.until(() => gw.services.realtime.liveCount === 0);
  }, 20_000);

  test('sessions of a key just created count toward its rpm on every node: the third opening of a 2-rpm key is refused', async () => {
    const k = await keyedUser({ rate_limit_rpm: 2 });
    await clearOfWindowEdge();
    const answers: number[] = [];
    // Over 3 nodes the proxy sends each opening to the next node.
    for (let i = 0; i < 3; i++) {
      const r = await fetch(`${gw.url}/v1/realtime?model=gpt-realtime`, { headers: { ...UPGRADE, authorization: `Bearer ${k.key}` }, signal: AbortSignal.timeout(5000) });
      answers.push(r.status);
      if (r.status === 101) await r.body?.cancel().catch(() => {});
      else expect(((await r.json()) as any).error.code).toBe('key_rpm_exceeded');
    }
    expect(answers).toEqual([101, 101, 429]);
  }, 30_000);
});
