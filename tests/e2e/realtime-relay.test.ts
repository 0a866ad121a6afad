/**
 * Relay mechanics of /v1/realtime over real sockets: a client WebSocket → the gateway route →
 * the realtime upstream double. The wiring is minimal (in-memory keys and channels, real SQLite,
 * real PriceBook and QuotaService) so the socket behaviour is tested on its own.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Elysia } from 'elysia';
import { ChangeBus, costOf } from '@gw/core';
import { LedgerRepo, PricesRepo, RealtimeSessionsRepo, SettlementsRepo, UsageLogsRepo, UsersRepo, apiKeys, openDatabase, type DbHandle } from '@gw/db';
import { PriceBook, QuotaService } from '@gw/billing';
import { getAdapter } from '@gw/providers';
import { RelayGate, orderCandidates, type GateKey } from '@gw/relay';
import { RealtimeService, adapterResolver, realtimeConfig, type RealtimeChannel } from '@gw/realtime';
import { httpErrors } from '../../apps/server/src/plugins/http-errors';
import { realtimeRoutes } from '../../apps/server/src/routes/realtime';
import { RealtimeTestClient, SAMPLE_USAGE, startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';

const PRICE = { model: 'gpt-realtime', input: 4_000_000, output: 16_000_000, cache_read: 400_000, audio_input: 32_000_000, audio_output: 64_000_000 };

interface Wiring {
  url: string;
  ws: string;
  h: DbHandle;
  service: RealtimeService<GateKey, Channel, any>;
  quota: QuotaService;
  book: PriceBook;
  keys: Map<string, GateKey>;
  channels: Channel[];
  userId: number;
  ledger: LedgerRepo;
  /** Lines the realtime service logged (unexpected errors). */
  logs: string[];
  /** A new user with `balance` and an API key; returns the plain key. */
  addKey(balance: number, extra?: Partial<GateKey>): { key: string; userId: number; keyId: number };
  stop(): Promise<void>;
}

async function wire(env: Record<string, string> = {}): Promise<Wiring> {
  const dir = mkdtempSync(join(tmpdir(), 'rt-'));
  const h = openDatabase(join(dir, 'db.sqlite'));
  const bus = new ChangeBus();
  const users = new UsersRepo(h.db);
  const ledger = new LedgerRepo(h.db, bus);
  const book = new PriceBook(new PricesRepo(h.db), bus);
  book.upsert(PRICE);
  const quota = new QuotaService({ sqlite: h.sqlite, users, settlements: new SettlementsRepo(h.sqlite), prices: book, bus });
  const userId = users.insert({ username: 'rt', passwordHash: 'x', createdAt: 1, updatedAt: 1 }).id;
  ledger.apply({ userId, kind: 'topup', amount: 10_000_000, ref: 'seed', at: 1 });
  const keyRow = h.db.insert(apiKeys).values({ userId, keyHash: 'h', prefix: 'sk-', createdAt: 1, updatedAt: 1 }).returning().get();
  const keys = new Map<string, GateKey>([['sk-good', {
    id: keyRow.id, userId, status: 1, expiresAt: null, unlimitedQuota: true, remainQuota: 0, models: null, allowIps: null, group: null, rateLimitRpm: 0,
  }]]);
  const owners = new Set([userId]);
  const addKey = (balance: number, extra: Partial<GateKey> = {}) => {
    const uid = users.insert({ username: `u${owners.size}`, passwordHash: 'x', createdAt: 1, updatedAt: 1 }).id;
    owners.add(uid);
    if (balance) ledger.apply({ userId: uid, kind: 'topup', amount: balance, ref: `seed${uid}`, at: 1 });
    const row = h.db.insert(apiKeys).values({ userId: uid, keyHash: `h${uid}`, prefix: 'sk-', createdAt: 1, updatedAt: 1 }).returning().get();
    const key = `sk-user-${uid}`;
    keys.set(key, { id: row.id, userId: uid, status: 1, expiresAt: null, unlimitedQuota: true, remainQuota: 0, models: null, allowIps: null, group: null, rateLimitRpm: 0, ...extra });
    return { key, userId: uid, keyId: row.id };
  };
  const channels: Channel[] = [];
  const logs: string[] = [];
  const gate = new RelayGate({ lookup: (k) => keys.get(k), user: (id) => (owners.has(id) ? { id, status: 1, group: 'default' } : undefined) });
  const service = new RealtimeService<GateKey, Channel, any>({
    config: realtimeConfig({ REALTIME_CONNECT_TIMEOUT_MS: '1000', ...env }),
    keys: { lookup: (k) => keys.get(k) },
    policy: gate,
    channels: {
      candidates: (m, g) => channels.filter((c) => c.models.includes(m) && c.groups.includes(g) && c.status === 1).sort((a, b) => b.priority - a.priority),
      all: () => channels,
    },
    prices: book,
    quota,
    upstream: adapterResolver(getAdapter),
    order: (c) => orderCandidates(c),
    sessions: new RealtimeSessionsRepo(h.db),
    billing: { requirePrice: true, minReserve: 1 },
    log: (line) => logs.push(line),
  });
  const app: any = new Elysia().use(httpErrors({ maxBodyBytes: 1 << 20, routes: () => app.routes })).use(realtimeRoutes(service));
  app.listen({ port: 0, hostname: '127.0.0.1' });
  const port = app.server!.port;
  return {
    url: `http://127.0.0.1:${port}`, ws: `ws://127.0.0.1:${port}`, h, service, quota, book, keys, channels, userId, ledger, addKey, logs,
    async stop() {
      service.closeAll();
      await app.stop(true);
      h.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

type Channel = RealtimeChannel & { status: number };
const channel = (id: number, up: { url: string }, extra: Partial<Channel> = {}): Channel => ({
  id, type: 'openai', baseUrl: up.url, apiKey: `up-key-${id}`, models: ['gpt-realtime'], modelMapping: { 'gpt-realtime': 'gpt-realtime-2025' },
  groups: ['default'], priority: 0, weight: 1, headers: {}, status: 1, ...extra,
});

let w: Wiring;
let up: RealtimeUpstreamDouble;
const clients: RealtimeTestClient[] = [];
const open = (path = '/v1/realtime?model=gpt-realtime', opts: { headers?: Record<string, string>; protocols?: string[] } = { headers: { authorization: 'Bearer sk-good' } }, gw: Wiring = w) => {
  const c = new RealtimeTestClient(gw.ws + path, opts);
  clients.push(c);
  return c;
};

beforeAll(async () => {
  up = startRealtimeUpstream();
  w = await wire();
  w.channels.push(channel(1, up));
});
afterAll(async () => {
  await w.stop();
  await up.stop();
});
afterEach(async () => {
  for (const c of clients.splice(0)) if (c.ws.readyState <= 1) c.ws.close();
  up.refuseWith = 0;
});

describe('realtime relay', () => {
  test('handshake: Bearer key, upstream gets the channel key and the mapped model; session.created relayed', async () => {
    const c = open();
    await c.opened;
    const created = await c.waitFor('session.created');
    expect(created.session.model).toBe('gpt-realtime-2025');
    const conn = up.connections.at(-1)!;
    expect(conn.headers.authorization).toBe('Bearer up-key-1');
    expect(new URL(conn.url).searchParams.get('model')).toBe('gpt-realtime-2025');
    expect(JSON.stringify(conn.headers)).not.toContain('sk-good');
  });

  test('subprotocol key: answered with "realtime", the key is never echoed', async () => {
    const c = open('/v1/realtime?model=gpt-realtime', { protocols: ['realtime', 'openai-insecure-api-key.sk-good'] });
    await c.opened;
    expect(c.ws.protocol).toBe('realtime');
    await c.waitFor('session.created');
  });

  test('text frames are byte-exact both ways, even JSON a re-serialiser would change', async () => {
    const c = open();
    await c.opened;
    const odd = '{ "type" : "conversation.item.create",  "big": 12345678901234567890123456789, "f": 1.10, "s":"\\u00e9\\"q\\"" }';
    c.ws.send(odd);
    await up.until(() => up.received.some((r) => r.data === odd));
    await c.waitFrames(2);
    expect(c.frames[1]).toBe(odd);
    up.send('{"type":"x.custom","n":1e400,  "z":-0}', up.connections.at(-1)!.id);
    await c.waitFrames(3);
    expect(c.frames[2]).toBe('{"type":"x.custom","n":1e400,  "z":-0}');
  });

  test('binary frames are byte-exact both ways', async () => {
    const c = open();
    await c.opened;
    await c.waitFor('session.created');
    const bytes = new Uint8Array(70_000).map((_, i) => (i * 7 + 3) & 0xff);
    c.ws.send(bytes);
    await up.until(() => up.received.some((r) => r.binary && Buffer.compare(r.data as Buffer, Buffer.from(bytes)) === 0));
    await c.waitFrames(2);
    expect(Buffer.isBuffer(c.frames[1])).toBe(true);
    expect(Buffer.compare(c.frames[1] as Buffer, Buffer.from(bytes))).toBe(0);
    up.send(new Uint8Array([0, 255, 1, 254]), up.connections.at(-1)!.id);
    await c.waitFrames(3);
    expect([...(c.frames[2] as Buffer)]).toEqual([0, 255, 1, 254]);
  });

  test('many frames keep their order (sent before the upstream is even open)', async () => {
    const c = open();
    await c.opened;
    const n = 500;
    for (let i = 0; i < n; i++) c.ws.send(i % 5 === 0 ? new Uint8Array([i & 0xff, i >> 8]) : `{"type":"x.seq","i":${i}}`);
    await c.waitFrames(n + 1);
    const conn = up.connections.at(-1)!.id;
    const got = up.received.filter((r) => r.conn === conn);
    expect(got.length).toBe(n);
    got.forEach((r, i) => {
      if (i % 5 === 0) expect([...(r.data as Buffer)]).toEqual([i & 0xff, i >> 8]);
      else expect(r.data).toBe(`{"type":"x.seq","i":${i}}`);
    });
    const echoed = c.frames.slice(1);
    echoed.forEach((f, i) => {
      if (i % 5 === 0) expect([...(f as Buffer)]).toEqual([i & 0xff, i >> 8]);
      else expect(f).toBe(`{"type":"x.seq","i":${i}}`);
    });
  });
});

/** A handshake that must fail before the upgrade: the HTTP status and the JSON error body. */
async function refused(path: string, headers: Record<string, string>, upgrade = true): Promise<{ status: number; body: any; headers: Headers }> {
  const h: Record<string, string> = { ...headers };
  if (upgrade) Object.assign(h, { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' });
  const res = await fetch(w.url + path, { headers: h, signal: AbortSignal.timeout(2000) });
  return { status: res.status, body: await res.json(), headers: res.headers };
}

const expectError = (r: { status: number; body: any; headers: Headers }, status: number, code: string) => {
  expect(r.status).toBe(status);
  expect(r.body.type).toBe('error');
  expect(r.body.error.code).toBe(code);
  for (const f of ['message', 'type', 'param', 'code']) expect(typeof r.body.error[f]).toBe('string');
  expect(r.body.request_id).toBe(r.headers.get('request-id')!);
  expect(r.body.request_id).toMatch(/^req_/);
};

describe('realtime pre-upgrade errors', () => {
  const bearer = { authorization: 'Bearer sk-good' };
  test('401 without a key and with an unknown key (header or subprotocol)', async () => {
    expectError(await refused('/v1/realtime', {}), 401, 'missing_api_key');
    expectError(await refused('/v1/realtime', { authorization: 'Bearer sk-nope' }), 401, 'invalid_api_key');
    expectError(await refused('/v1/realtime', { 'sec-websocket-protocol': 'realtime, openai-insecure-api-key.sk-nope' }), 401, 'invalid_api_key');
    const c = open('/v1/realtime', { protocols: ['realtime', 'openai-insecure-api-key.sk-nope'] });
    expect(await c.opened.then(() => 'open', () => 'refused')).toBe('refused');
  });

  test('400 for a plain GET, answered at once', async () => {
    const t0 = performance.now();
    expectError(await refused('/v1/realtime', bearer, false), 400, 'websocket_required');
    expect(performance.now() - t0).toBeLessThan(1000);
  });

  test('403 model not allowed / IP not allowed; 404 unknown model; 503 no healthy channel; 402 no quota', async () => {
    const k = w.keys.get('sk-good')!;
    w.keys.set('sk-models', { ...k, models: ['other-model'] });
    w.keys.set('sk-ip', { ...k, allowIps: ['10.0.0.0/8'] });
    expectError(await refused('/v1/realtime?model=gpt-realtime', { authorization: 'Bearer sk-models' }), 403, 'model_not_allowed');
    expectError(await refused('/v1/realtime?model=gpt-realtime', { authorization: 'Bearer sk-ip' }), 403, 'ip_not_allowed');
    w.keys.set('sk-ip-ok', { ...k, allowIps: ['127.0.0.0/8'] });
    const ok = open('/v1/realtime?model=gpt-realtime', { headers: { authorization: 'Bearer sk-ip-ok' } });
    await ok.opened;
    expectError(await refused('/v1/realtime?model=nope', bearer), 404, 'model_not_found');
    w.channels.push(channel(99, up, { models: ['sleepy', 'unpriced'], status: 3 }));
    expectError(await refused('/v1/realtime?model=unpriced', bearer), 403, 'model_not_priced');
    w.book.upsert({ ...PRICE, model: 'sleepy' });
    expectError(await refused('/v1/realtime?model=sleepy', bearer), 503, 'no_healthy_channel');
    w.keys.set('sk-poor', { ...k, unlimitedQuota: false, remainQuota: 0 });
    expectError(await refused('/v1/realtime?model=gpt-realtime', { authorization: 'Bearer sk-poor' }), 402, 'key_quota_exhausted');
  });

  test('missing model uses REALTIME_DEFAULT_MODEL (gpt-realtime by default)', async () => {
    const c = open('/v1/realtime');
    await c.opened;
    const created = await c.waitFor('session.created');
    expect(created.session.model).toBe('gpt-realtime-2025');
  });
});

describe('realtime upstream failures', () => {
  test('an upstream refusing the handshake: the next channel is used', async () => {
    const dead = startRealtimeUpstream();
    dead.refuseWith = 503;
    w.channels.push(channel(2, dead, { priority: 10 }));
    try {
      const c = open();
      await c.opened;
      c.ws.send('{"type":"x.early"}');
      await c.waitFor('session.created');
      await c.waitFor('x.early');
      expect(up.received.some((r) => r.data === '{"type":"x.early"}')).toBe(true);
    } finally {
      w.channels.splice(w.channels.findIndex((x) => x.id === 2), 1);
      await dead.stop();
    }
  });

  test('no upstream reachable: error event, then close 1013', async () => {
    up.refuseWith = 502;
    const c = open();
    await c.opened;
    const close = await c.waitClose();
    expect(close.code).toBe(1013);
    const err = c.events().find((e) => e.type === 'error');
    expect(err.error.code).toBe('upstream_unavailable');
  });

  test('upstream drops mid-session: error event, then close 1011', async () => {
    const c = open();
    await c.opened;
    await c.waitFor('session.created');
    up.drop();
    const close = await c.waitClose();
    expect(close.code).toBe(1011);
    expect(c.events().at(-1).type).toBe('error');
    expect(c.events().at(-1).error.code).toBe('upstream_disconnected');
  });

  test('upstream closes normally: client gets the same close code and reason', async () => {
    const c = open();
    await c.opened;
    await c.waitFor('session.created');
    up.closeAll(1000, 'bye now');
    expect(await c.waitClose()).toEqual({ code: 1000, reason: 'bye now' });
  });

  test('client drops: the upstream socket is closed too', async () => {
    const c = open();
    await c.opened;
    await c.waitFor('session.created');
    const conn = up.connections.at(-1)!;
    c.ws.close(4000, 'done here');
    await up.until(() => conn.closed !== null);
    expect(conn.closed).toEqual({ code: 4000, reason: 'done here' });
    c.ws.terminate();
  });
});

const RESPONSE_CREATE = '{"type":"response.create","response":{"output_modalities":["text"]}}';
const bearerOf = (key: string) => ({ headers: { authorization: `Bearer ${key}` } });
/** The charge of SAMPLE_USAGE at PRICE, computed here independently of the gateway. */
const SAMPLE_COST = costOf([
  [80 - 64, PRICE.input], [320 - 192, PRICE.audio_input], [256, PRICE.cache_read], [30, PRICE.output], [82, PRICE.audio_output],
]);

describe('realtime metering', () => {
  test('every response.done is billed exactly: usage × prices = charge = usage log rows; session record written', async () => {
    const { key, userId } = w.addKey(5_000_000);
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
    expect(w.ledger.sum(userId)).toBe(5_000_000 - 3 * SAMPLE_COST);
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

  test('quota runs out mid-session: the next response is refused with an error event and close 1008', async () => {
    // Enough for the admission check and one response's reservation, not for a second one after the charge.
    const reserve = 4096 * PRICE.audio_output / 1_000_000;
    const { key, userId } = w.addKey(reserve + SAMPLE_COST - 1);
    const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key));
    await c.opened;
    c.ws.send(RESPONSE_CREATE);
    await c.waitFor('response.done');
    const before = up.received.length;
    c.ws.send(RESPONSE_CREATE);
    const close = await c.waitClose();
    expect(close.code).toBe(1008);
    const err = c.events().at(-1);
    expect(err.type).toBe('error');
    expect(err.error.code).toBe('quota_exhausted');
    expect(up.received.length).toBe(before); // the refused response.create never reached the upstream
    expect(w.quota.balance(userId)).toBe(reserve - 1);
    expect(w.h.sqlite.query('select count(*) as n from usage_logs where user_id = ?').get(userId)).toEqual({ n: 1 });
    // And a new session is refused before the upgrade.
    const r = await refused('/v1/realtime?model=gpt-realtime', { authorization: `Bearer ${key}` });
    expectError(r, 402, 'quota_exhausted');
  });
});

describe('realtime session edge cases', () => {
  test('server-started responses (server VAD, no client response.create) are reserved and billed too', async () => {
    const { key, userId } = w.addKey(5_000_000);
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
    const reserve = 4096 * PRICE.audio_output / 1_000_000;
    const { key, userId } = w.addKey(reserve + SAMPLE_COST); // room for one reservation at a time
    const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key));
    await c.opened;
    up.refuseResponses = 1;
    c.ws.send(RESPONSE_CREATE);
    await c.waitFor('error');
    c.ws.send(RESPONSE_CREATE);
    await c.waitFor('response.done');
    expect(c.close).toBeNull();
    expect(w.quota.available(userId)).toBe(reserve);
  });

  test('a key revoked mid-session: the next response is refused (error event, close 1008)', async () => {
    const { key } = w.addKey(5_000_000);
    const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key));
    await c.opened;
    await c.waitFor('session.created');
    w.keys.delete(key);
    c.ws.send(RESPONSE_CREATE);
    expect((await c.waitClose()).code).toBe(1008);
    expect(c.events().at(-1).error.code).toBe('api_key_revoked');
  });

  test('usage that cannot be written ends the session (1011) instead of serving unbilled responses', async () => {
    const { key, userId } = w.addKey(5_000_000);
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

describe('realtime limits, backpressure and shutdown', () => {
  let g: Wiring;
  let u2: RealtimeUpstreamDouble;
  beforeAll(async () => {
    u2 = startRealtimeUpstream();
    g = await wire({ REALTIME_MAX_SESSIONS_PER_KEY: '2', REALTIME_MAX_SESSION_SECONDS: '1', REALTIME_BUFFER_BYTES: '65536', REALTIME_CONNECT_TIMEOUT_MS: '200' });
    g.channels.push(channel(1, u2));
  });
  afterAll(async () => {
    await g.stop();
    await u2.stop();
  });

  test('sessions per key are limited (429 before the upgrade) and the slot frees when a session ends', async () => {
    const { key } = g.addKey(5_000_000);
    const a = open('/v1/realtime', bearerOf(key), g);
    const b = open('/v1/realtime', bearerOf(key), g);
    await Promise.all([a.opened, b.opened]);
    const h = { authorization: `Bearer ${key}`, connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' };
    const res = await fetch(`${g.url}/v1/realtime`, { headers: h });
    expect(res.status).toBe(429);
    expect(((await res.json()) as any).error.code).toBe('too_many_sessions');
    expect(res.headers.get('retry-after')).toBe('1');
    a.ws.close();
    await a.waitClose();
    await u2.until(() => g.service.liveCount === 1);
    const c = open('/v1/realtime', bearerOf(key), g);
    await c.opened;
    b.ws.close();
    c.ws.close();
  });

  test('an upstream that accepts TCP but never answers the handshake times out; the next channel serves', async () => {
    const silent = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } });
    g.channels.push(channel(7, { url: `http://127.0.0.1:${silent.port}` }, { priority: 5 }));
    try {
      const { key } = g.addKey(5_000_000);
      const t0 = performance.now();
      const c = open('/v1/realtime', bearerOf(key), g);
      await c.opened;
      await c.waitFor('session.created');
      expect(performance.now() - t0).toBeGreaterThanOrEqual(190);
      c.ws.close();
      await c.waitClose();
    } finally {
      g.channels.splice(g.channels.findIndex((x) => x.id === 7), 1);
      silent.stop(true);
    }
  });

  test('a session reaching REALTIME_MAX_SESSION_SECONDS gets an error event and close 1008', async () => {
    const { key, userId } = g.addKey(5_000_000);
    const c = open('/v1/realtime', bearerOf(key), g);
    await c.opened;
    const close = await c.waitClose(2500);
    expect(close.code).toBe(1008);
    expect(c.events().at(-1).error.code).toBe('session_time_limit');
    await u2.until(() => !!g.h.sqlite.query('select 1 from realtime_sessions where user_id = ?').get(userId));
    const s = g.h.sqlite.query('select close_code, duration_ms from realtime_sessions where user_id = ?').get(userId) as any;
    expect(s.close_code).toBe(1008);
    expect(s.duration_ms).toBeGreaterThanOrEqual(990);
  });

  test('slow client: the gateway stops reading the upstream instead of buffering; nothing is lost', async () => {
    const { key } = g.addKey(5_000_000);
    const c = open('/v1/realtime', bearerOf(key), g);
    await c.opened;
    await c.waitFor('session.created');
    c.ws.pause();
    const conn = u2.connections.at(-1)!;
    const frame = (i: number) => `{"type":"x.bulk","i":${i},"pad":"${'a'.repeat(64 * 1024)}"}`;
    const n = 512; // 32 MB: more than the kernel buffers of both hops and Bun's 16 MB send queue
    for (let i = 0; i < n; i++) u2.send(frame(i), conn.id);
    await Bun.sleep(150);
    // The gateway paused its upstream socket, so the double still holds much of the data.
    expect(u2.unsent(conn.id)).toBeGreaterThan(4 * 1024 * 1024);
    c.ws.resume();
    await c.waitFrames(n + 1, 4000);
    for (let i = 0; i < n; i++) expect(c.frames[i + 1]).toBe(frame(i));
    c.ws.close();
  });

  test('slow upstream: the gateway stops reading the client; nothing is lost', async () => {
    const { key } = g.addKey(5_000_000);
    const c = open('/v1/realtime', bearerOf(key), g);
    await c.opened;
    await c.waitFor('session.created');
    u2.echo = false;
    const conn = u2.connections.at(-1)!;
    conn.ws.pause();
    const chunk = Buffer.alloc(64 * 1024, 7);
    const n = 512; // 32 MB: more than the kernel buffers of both hops can hold
    for (let i = 0; i < n; i++) { chunk.writeUInt32BE(i, 0); c.ws.send(chunk); }
    await Bun.sleep(150);
    // The gateway paused the client socket, so the data is still queued at the client.
    expect(c.ws.bufferedAmount).toBeGreaterThan(4 * 1024 * 1024);
    conn.ws.resume();
    await u2.until(() => u2.received.filter((r) => r.conn === conn.id).length === n, 10_000);
    const got = u2.received.filter((r) => r.conn === conn.id);
    got.forEach((r, i) => expect((r.data as Buffer).readUInt32BE(0)).toBe(i));
    u2.echo = true;
    c.ws.close();
  });

  test('shutdown closes live sessions with 1001 and records them', async () => {
    const { key, userId } = g.addKey(5_000_000);
    const c = open('/v1/realtime', bearerOf(key), g);
    await c.opened;
    await c.waitFor('session.created');
    const conn = u2.connections.at(-1)!;
    g.service.closeAll();
    expect((await c.waitClose()).code).toBe(1001);
    expect(c.events().at(-1).error.code).toBe('server_shutdown');
    expect((g.h.sqlite.query('select close_code from realtime_sessions where user_id = ?').get(userId) as any).close_code).toBe(1001);
    await u2.until(() => conn.closed !== null);
    const r = await fetch(`${g.url}/v1/realtime`, { headers: { authorization: `Bearer ${key}`, connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' } });
    expect(r.status).toBe(503);
  });
});
