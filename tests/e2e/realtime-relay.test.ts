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
import { LedgerRepo, PricesRepo, UsageLogsRepo, UsersRepo, apiKeys, openDatabase, type DbHandle } from '@gw/db';
import { RealtimeSessionsRepo } from '@gw/db/repos/realtime-sessions';
import { PriceBook, QuotaService } from '@gw/billing';
import { RealtimeService, openAiRealtimeResolver, realtimeConfig, type RealtimeChannel, type RealtimeKey } from '@gw/realtime';
import { httpErrors } from '../../apps/server/src/plugins/http-errors';
import { realtimeRoutes } from '../../apps/server/src/routes/realtime';
import { RealtimeTestClient, SAMPLE_USAGE, startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';

const PRICE = { model: 'gpt-realtime', input: 4_000_000, output: 16_000_000, cache_read: 400_000, audio_input: 32_000_000, audio_output: 64_000_000 };

interface Wiring {
  url: string;
  ws: string;
  h: DbHandle;
  service: RealtimeService<RealtimeKey, RealtimeChannel, any>;
  quota: QuotaService;
  keys: Map<string, RealtimeKey>;
  channels: RealtimeChannel[];
  userId: number;
  ledger: LedgerRepo;
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
  const quota = new QuotaService({ db: h.db, users, ledger, usageLogs: new UsageLogsRepo(h.db), prices: book, bus });
  const userId = users.insert({ username: 'rt', passwordHash: 'x', createdAt: 1, updatedAt: 1 }).id;
  ledger.apply({ userId, kind: 'topup', amount: 10_000_000, ref: 'seed', at: 1 });
  const keyRow = h.db.insert(apiKeys).values({ userId, keyHash: 'h', prefix: 'sk-', createdAt: 1, updatedAt: 1 }).returning().get();
  const keys = new Map<string, RealtimeKey>([['sk-good', {
    id: keyRow.id, userId, status: 1, expiresAt: null, unlimitedQuota: true, remainQuota: 0, models: null, allowIps: null, group: null,
  }]]);
  const channels: RealtimeChannel[] = [];
  const service = new RealtimeService<RealtimeKey, RealtimeChannel, any>({
    config: realtimeConfig({ REALTIME_CONNECT_TIMEOUT_MS: '1000', ...env }),
    keys: { lookup: (k) => keys.get(k) },
    accounts: { get: (id) => (id === userId ? { id, status: 1, group: 'default' } : undefined) },
    channels: {
      candidates: (m) => channels.filter((c) => c.models.includes(m) && (c as any).status !== 2).sort((a, b) => b.priority - a.priority),
      models: () => [...new Set(channels.filter((c) => (c as any).status !== 2).flatMap((c) => c.models))],
      knows: (m) => channels.some((c) => c.models.includes(m)),
    },
    prices: book,
    quota,
    upstream: openAiRealtimeResolver,
    sessions: new RealtimeSessionsRepo(h.db),
    billing: { requirePrice: true, minReserve: 1 },
  });
  const app: any = new Elysia().use(httpErrors({ maxBodyBytes: 1 << 20, routes: () => app.routes })).use(realtimeRoutes(service));
  app.listen({ port: 0, hostname: '127.0.0.1' });
  const port = app.server!.port;
  return {
    url: `http://127.0.0.1:${port}`, ws: `ws://127.0.0.1:${port}`, h, service, quota, keys, channels, userId, ledger,
    async stop() {
      service.closeAll();
      await app.stop(true);
      h.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const channel = (id: number, up: { url: string }, extra: Partial<RealtimeChannel> = {}): RealtimeChannel => ({
  id, type: 'openai', baseUrl: up.url, apiKey: `up-key-${id}`, models: ['gpt-realtime'], modelMapping: { 'gpt-realtime': 'gpt-realtime-2025' },
  priority: 0, weight: 1, headers: {}, ...extra,
});

let w: Wiring;
let up: RealtimeUpstreamDouble;
const clients: RealtimeTestClient[] = [];
const open = (path = '/v1/realtime?model=gpt-realtime', opts: { headers?: Record<string, string>; protocols?: string[] } = { headers: { authorization: 'Bearer sk-good' } }) => {
  const c = new RealtimeTestClient(w.ws + path, opts);
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
