/**
 * Wiring for the realtime relay tests: a client WebSocket → the gateway route → the realtime upstream
 * double. Minimal (in-memory keys and channels, real SQLite, real PriceBook and QuotaService) so the
 * socket behaviour is tested on its own. Each test file calls realtimeSuite() once.
 */
import { afterAll, afterEach, beforeAll, expect } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Elysia } from 'elysia';
import { ChangeBus, costOf, memoryLogger } from '@gw/core';
import { LedgerRepo, PricesRepo, RealtimeSessionsRepo, SettlementsRepo, UsageLogsRepo, UsersRepo, apiKeys, openDatabase, type AsyncSettlementSink, type DbHandle } from '@gw/db';
import { PriceBook, QuotaService } from '@gw/billing';
import { getAdapter } from '@gw/providers';
import { RelayGate, UpstreamSlots, orderCandidates, type GateKey } from '@gw/relay';
import { RealtimeService, adapterResolver, realtimeConfig, type QuotaPort, type RealtimeChannel } from '@gw/realtime';
import { httpErrors } from '../../apps/server/src/plugins/http-errors';
import { RouteTable } from '../../apps/server/src/plugins/route-table';
import { realtimeRoutes } from '../../apps/server/src/routes/realtime';
import { RealtimeTestClient, SAMPLE_USAGE, startRealtimeUpstream, type RealtimeUpstreamDouble } from '../doubles/realtime-upstream';

export const PRICE = { model: 'gpt-realtime', input: 4_000_000, output: 16_000_000, cache_read: 400_000, audio_input: 32_000_000, audio_output: 64_000_000, context_window: 32_000 };
/** One response's reservation at the default max output (4,096): context window at the dearest input price + output at the dearest output price. */
export const RESERVE = costOf([[PRICE.context_window, PRICE.audio_input], [4096, PRICE.audio_output]]);

export interface Wiring {
  url: string;
  ws: string;
  h: DbHandle;
  service: RealtimeService<GateKey, Channel, any>;
  quota: QuotaService;
  book: PriceBook;
  keys: Map<string, GateKey>;
  channels: Channel[];
  /** Group price ratios (per-mille) the key policy reports; unset = 1000. */
  ratios: Map<string, number>;
  userId: number;
  ledger: LedgerRepo;
  /** Lines the realtime service logged (unexpected errors). */
  logs: string[];
  /** A new user with `balance` and an API key; returns the plain key. */
  addKey(balance: number, extra?: Partial<GateKey>): Promise<{ key: string; userId: number; keyId: number }>;
  /** The gateway-wide cap (MAX_UPSTREAM_CONNECTIONS in `env`, else unlimited for these tests). */
  slots: UpstreamSlots;
  stop(): Promise<void>;
}

export interface WireOptions {
  /** Settle through this durable sink (as the PostgreSQL mode does: QuotaService.openDurable) instead of the SQLite one. */
  durable?: (h: DbHandle) => AsyncSettlementSink;
  /** The quota port the relay sees, built around the real QuotaService (e.g. reservations answered later). */
  port?: (q: QuotaService) => QuotaPort<GateKey, any>;
}

export async function wire(env: Record<string, string> = {}, opts: WireOptions = {}): Promise<Wiring> {
  const dir = mkdtempSync(join(tmpdir(), 'rt-'));
  const h = openDatabase(join(dir, 'db.sqlite'));
  const bus = new ChangeBus();
  const users = new UsersRepo(h.db);
  const ledger = new LedgerRepo(h.db, bus);
  const book = await PriceBook.load(new PricesRepo(h.db), bus);
  await book.upsert(PRICE);
  const quota = opts.durable
    ? await QuotaService.openDurable({ durable: opts.durable(h), prices: book, bus })
    : new QuotaService({ sink: new SettlementsRepo(h.sqlite), prices: book, bus });
  const userId = (await users.insert({ username: 'rt', passwordHash: 'x', createdAt: 1, updatedAt: 1 })).id;
  await ledger.apply({ userId, kind: 'topup', amount: 10_000_000, ref: 'seed', at: 1 });
  const keyRow = h.db.insert(apiKeys).values({ userId, keyHash: 'h', prefix: 'sk-', createdAt: 1, updatedAt: 1 }).returning().get();
  const keys = new Map<string, GateKey>([['sk-good', {
    id: keyRow.id, userId, status: 1, expiresAt: null, unlimitedQuota: true, remainQuota: 0, models: null, allowIps: null, group: null, rateLimitRpm: 0, rateLimitTpm: 0, maxConcurrency: 0,
  }]]);
  const owners = new Set([userId]);
  const addKey = async (balance: number, extra: Partial<GateKey> = {}) => {
    const uid = (await users.insert({ username: `u${owners.size}`, passwordHash: 'x', createdAt: 1, updatedAt: 1 })).id;
    owners.add(uid);
    if (balance) await ledger.apply({ userId: uid, kind: 'topup', amount: balance, ref: `seed${uid}`, at: 1 });
    const row = h.db.insert(apiKeys).values({ userId: uid, keyHash: `h${uid}`, prefix: 'sk-', createdAt: 1, updatedAt: 1 }).returning().get();
    const key = `sk-user-${uid}`;
    keys.set(key, { id: row.id, userId: uid, status: 1, expiresAt: null, unlimitedQuota: true, remainQuota: 0, models: null, allowIps: null, group: null, rateLimitRpm: 0, rateLimitTpm: 0, maxConcurrency: 0, ...extra });
    return { key, userId: uid, keyId: row.id };
  };
  const channels: Channel[] = [];
  const { log, lines: logs } = memoryLogger();
  const gate = new RelayGate({ lookup: (k) => keys.get(k), user: (id) => (owners.has(id) ? { id, status: 1, group: 'default', rateLimitRpm: 0, rateLimitTpm: 0, maxConcurrency: 0 } : undefined) });
  /** Group price ratios (per-mille) by group name; unset = 1000. */
  const ratios = new Map<string, number>();
  const slots = new UpstreamSlots(Number(env.MAX_UPSTREAM_CONNECTIONS ?? 1_000_000));
  const service = new RealtimeService<GateKey, Channel, any>({
    config: realtimeConfig({ REALTIME_CONNECT_TIMEOUT_MS: '1000', ...env }),
    keys: { lookup: (k) => keys.get(k) },
    // The gate plus a group price ratio, as the composition root passes them.
    policy: { authorize: (k: GateKey, m: string, ip: string) => { const { group } = gate.authorize(k, m, ip); return { group, ratio: ratios.get(group) }; } },
    channels: {
      candidates: (m, g) => channels.filter((c) => c.models.includes(m) && c.groups.includes(g) && c.status === 1).sort((a, b) => b.priority - a.priority),
      all: () => channels,
    },
    prices: book,
    quota: opts.port?.(quota) ?? quota,
    upstream: adapterResolver(getAdapter),
    order: (c) => orderCandidates(c),
    sessions: new RealtimeSessionsRepo(h.db),
    billing: { requirePrice: true, minReserve: 1 },
    log, slots,
  });
  let table: RouteTable | undefined;
  const app: any = new Elysia().use(httpErrors({ table: () => (table ??= new RouteTable(app.routes)), log })).use(realtimeRoutes(service, log));
  app.listen({ port: 0, hostname: '127.0.0.1' });
  const port = app.server!.port;
  return {
    url: `http://127.0.0.1:${port}`, ws: `ws://127.0.0.1:${port}`, h, service, quota, book, keys, channels, userId, ledger, addKey, logs, ratios, slots,
    async stop() {
      await service.closeAll();
      await app.stop(true);
      h.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export type Channel = RealtimeChannel & { status: number };
export const channel = (id: number, up: { url: string }, extra: Partial<Channel> = {}): Channel => ({
  id, type: 'openai', baseUrl: up.url, apiKey: `up-key-${id}`, models: ['gpt-realtime'], modelMapping: { 'gpt-realtime': 'gpt-realtime-2025' },
  groups: ['default'], priority: 0, weight: 1, headers: {}, status: 1, ...extra,
});

export let w: Wiring;
export let up: RealtimeUpstreamDouble;
export const clients: RealtimeTestClient[] = [];
/** Opens a client WebSocket to the gateway (default: the Bearer test key, model gpt-realtime). */
export const open = (path = '/v1/realtime?model=gpt-realtime', opts: { headers?: Record<string, string>; protocols?: string[] } = { headers: { authorization: 'Bearer sk-good' } }, gw: Wiring = w) => {
  const c = new RealtimeTestClient(gw.ws + path, opts);
  clients.push(c);
  return c;
};

/** Registers the suite's hooks in the calling test file: one wiring and one upstream double per file. */
export function realtimeSuite(): void {
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
}

/** An HTTP request to /v1/realtime that must be refused before the upgrade. */
export async function refused(path: string, headers: Record<string, string>, upgrade = true): Promise<{ status: number; body: any; headers: Headers }> {
  const h: Record<string, string> = { ...headers };
  if (upgrade) Object.assign(h, { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' });
  const res = await fetch(w.url + path, { headers: h, signal: AbortSignal.timeout(2000) });
  return { status: res.status, body: await res.json(), headers: res.headers };
}

export const expectError = (r: { status: number; body: any; headers: Headers }, status: number, code: string) => {
  expect(r.status).toBe(status);
  expect(r.body.type).toBe('error');
  expect(r.body.error.code).toBe(code);
  for (const f of ['message', 'type', 'param', 'code']) expect(typeof r.body.error[f]).toBe('string');
  expect(r.body.request_id).toBe(r.headers.get('request-id')!);
  expect(r.body.request_id).toMatch(/^req_/);
};

export const RESPONSE_CREATE = '{"type":"response.create","response":{"output_modalities":["text"]}}';
export const bearerOf = (key: string) => ({ headers: { authorization: `Bearer ${key}` } });

/** A funded key's session that asks for one response, waits for it and closes; returns the key's user id. */
export async function respondOnce(): Promise<number> {
  const { key, userId } = await w.addKey(5_000_000);
  const c = open('/v1/realtime?model=gpt-realtime', bearerOf(key));
  await c.opened;
  c.ws.send(RESPONSE_CREATE);
  await c.waitFor('response.done');
  c.ws.close(1000, 'finished');
  await c.waitClose();
  return userId;
}

/** A client session and the id of its upstream connection on the double. */
export interface OpenSession { c: RealtimeTestClient; conn: number }

/**
 * What the crash tests leave running on a gateway before killing it: session 1, a response completed (settled), then
 * one stopped before its response.done after all its output (`cutId`); session 2, a response the upstream started
 * itself (server VAD), with no output (`resp_vad_kill`). `open` opens a session on the gateway under test.
 */
export async function leaveResponsesRunning(up: RealtimeUpstreamDouble, open: () => Promise<OpenSession>): Promise<{ s1: OpenSession; s2: OpenSession; cutId: string }> {
  const s1 = await open();
  s1.c.ws.send(RESPONSE_CREATE);
  await s1.c.waitFor('response.done');
  up.stopBefore = 'response.done';
  s1.c.ws.send(RESPONSE_CREATE);
  await s1.c.waitFor('response.output_text.done', 2);
  const cutId = (await s1.c.waitFor('response.created', 2)).response.id as string;
  const s2 = await open();
  up.send('{"type":"response.created","response":{"id":"resp_vad_kill","status":"in_progress"}}', s2.conn);
  await s2.c.waitFor('response.created');
  return { s1, s2, cutId };
}
/** The charge of SAMPLE_USAGE at PRICE, computed here independently of the gateway. */
export const SAMPLE_COST = costOf([
  [80 - 64, PRICE.input], [320 - 192, PRICE.audio_input], [256, PRICE.cache_read], [30, PRICE.output], [82, PRICE.audio_output],
]);

