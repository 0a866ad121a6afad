/**
 * N nodes admit like one: three in-process gateways on one PostgreSQL schema and one Redis prefix,
 * requests spread over them, a user (or a limited key) funded for exactly 20 worst cases. Each request
 * costs exactly its reservation (input price 0, output 1 unit per token, max_tokens 10, the upstream
 * reports 10 output tokens), so exactly 20 may be served whatever the interleaving; before the shared
 * holds each node admitted against its own view and up to 3 × 20 were served.
 * Also: a hold whose node died stops counting after the leader reconciles it, and a Redis data loss
 * (the prefix's keys deleted under load) answers 503 until live holds are back and overspends nothing.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import type { RedisHoldStore } from '@gw/billing/holds/redis';
import type { PgGroupCommitter } from '@gw/db/pg';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { dropSchema, freshSchema, PG_TEST_URL, requirePg } from '../helpers/postgres';
import { dropPrefix, freshPrefix, REDIS_TEST_URL, redisClient, requireRedis, settleAdmissionEpoch } from '../helpers/redis';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

const available = (await requirePg('tests/cluster/admission.test.ts')) && (await requireRedis('tests/cluster/admission.test.ts'));
const schema = freshSchema('gw_admission');
const prefix = freshPrefix('admission');
const LEASE_MS = 3_000; // renewed every second; recovery window after a data loss: 1 s + 1 s
const MODEL = 'adm';
/** Worst case = cost of one request (see above). */
const W = 10;

let nodes: TestGateway[] = [];
let ant: Scripted;
const redis = available ? redisClient() : null;

afterAll(async () => {
  for (const n of nodes.reverse()) await n.stop().catch(() => {});
  await ant?.stop();
  redis?.disconnect();
  if (available) await Promise.all([dropPrefix(prefix), dropSchema(schema)]);
});

const node = (i: number) => nodes[i % nodes.length]!;
const sum = async (q: string, ...p: unknown[]) => Number((await nodes[0]!.db.get<{ s: unknown }>(q, ...p))?.s ?? 0);

async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 5_000) {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(20);
  }
}

/** Every node knows the key (the change feed carried it from the node that created it). */
const keyEverywhere = (key: string) => until('the key on every node', () => nodes.every((n) => n.services.apiKeys.lookup(key) !== undefined));

/** The holds Redis keeps for a user: Σ held on the account and the number of hold records. */
async function redisHolds(userId: number) {
  const [held, count] = await Promise.all([redis!.hget(`${prefix}{u:${userId}}:acct`, 'held'), redis!.hlen(`${prefix}{u:${userId}}:holds`)]);
  return { held: Number(held ?? 0), count };
}

async function ledgerState(userId: number) {
  return {
    quota: await sum('select quota as s from users where id = ?', userId),
    ledger: await sum('select coalesce(sum(amount), 0) as s from ledger where user_id = ?', userId),
    charges: await sum(`select count(*) as s from ledger where user_id = ? and kind = 'charge'`, userId),
  };
}

describe.skipIf(!available)('quota admission across nodes (PostgreSQL + Redis holds)', () => {
  beforeAll(async () => {
    // A fresh prefix has no admission epoch: settled here, as a cluster past its first recovery window is.
    await settleAdmissionEpoch(prefix);
    const env = {
      DATABASE_URL: PG_TEST_URL, PG_SCHEMA: schema, REDIS_URL: REDIS_TEST_URL, REDIS_PREFIX: prefix,
      SECRET_KEY: Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('hex'),
      HOLD_LEASE_MS: String(LEASE_MS), HOLD_RECONCILE_MS: '250',
    };
    // One at a time: the first creates the root (and migrates), the others find it.
    for (let i = 0; i < 3; i++) nodes.push(await startGateway(env));
    ant = upstream('anthropic', { usage: { input: 0, output: 10 }, delayMs: 150 });
    await addChannel(nodes[0]!, { type: 'anthropic', url: ant.url, models: [MODEL] });
    await setPrice(nodes[0]!, MODEL, { input: 0, output: 1_000_000, cache_read: 0, cache_write: 0 });
    await until('channel and price on every node', () => nodes.every((n) => n.services.relay.prices.get(MODEL) !== undefined
      && n.services.channelRegistry.candidates(MODEL, 'default').length > 0));
  });

  test('60 concurrent requests over 3 nodes against a user funded for exactly 20: 20 served, 40 refused (402), balance 0 = Σ ledger, no hold left', async () => {
    const u = await keyedUser(nodes[0]!, 20 * W);
    await keyEverywhere(u.key);
    const results = await Promise.all(Array.from({ length: 60 }, (_, i) => send(node(i), u.key, msg(MODEL, { max_tokens: 10 }))));
    const served = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status === 402);
    expect(served).toHaveLength(20);
    expect(refused).toHaveLength(40);
    expect(new Set(refused.map((r) => r.body.error.type))).toEqual(new Set(['billing_error']));
    expect(refused[0]!.body.error.message).toMatch(/^Insufficient balance: this request may cost up to 10 quota units, \d+ available$/);
    expect(await ledgerState(u.id)).toEqual({ quota: 0, ledger: 0, charges: 20 });
    expect(await redisHolds(u.id)).toEqual({ held: 0, count: 0 });
    // The mirror every node admits against is the ledger's balance.
    expect(await nodes[1]!.services.backend.holds!.store.available({ userId: u.id })).toEqual({ user: 0, key: null });
  });

  test('the same for a limited key: remain_quota for exactly 20 worst cases serves 20 (others 402 key_quota_exhausted), remain_quota 0', async () => {
    const u = await keyedUser(nodes[1]!, 1_000_000, { unlimited_quota: false, remain_quota: 20 * W });
    await keyEverywhere(u.key);
    const results = await Promise.all(Array.from({ length: 60 }, (_, i) => send(node(i + 1), u.key, msg(MODEL, { max_tokens: 10 }))));
    expect(results.filter((r) => r.status === 200)).toHaveLength(20);
    const refused = results.filter((r) => r.status === 402);
    expect(refused).toHaveLength(40);
    expect(new Set(refused.map((r) => r.body.error.code))).toEqual(new Set(['key_quota_exhausted']));
    expect(refused[0]!.body.error.message).toMatch(/^API key quota exhausted: this request may cost up to 10 quota units, \d+ left on the key$/);
    const key = await nodes[0]!.db.get<{ remain_quota: number; used_quota: number }>('select remain_quota, used_quota from api_keys where id = ?', u.keyId);
    expect({ remain: Number(key!.remain_quota), used: Number(key!.used_quota) }).toEqual({ remain: 0, used: 20 * W });
    expect(await ledgerState(u.id)).toEqual({ quota: 1_000_000 - 20 * W, ledger: 1_000_000 - 20 * W, charges: 20 });
    expect(await redisHolds(u.id)).toEqual({ held: 0, count: 0 });
  });

  test('a top-up on one node is admissible on every node at once (its mirror is installed before the call returns)', async () => {
    const u = await keyedUser(nodes[0]!, W);
    await keyEverywhere(u.key);
    expect((await send(node(1), u.key, msg(MODEL, { max_tokens: 10 }))).status).toBe(200);
    expect((await send(node(2), u.key, msg(MODEL, { max_tokens: 10 }))).status).toBe(402);
    const adj = await nodes[0]!.api('POST', '/api/ledger/adjust', { user_id: u.id, amount: 3 * W, note: 'more' });
    expect(adj.status).toBe(200);
    const results = await Promise.all([1, 2, 0, 1].map((i) => send(node(i), u.key, msg(MODEL, { max_tokens: 10 }))));
    expect(results.map((r) => r.status).sort()).toEqual([200, 200, 200, 402]);
    expect(await ledgerState(u.id)).toEqual({ quota: 0, ledger: 0, charges: 4 });
  });

  test('a key made limited while its request runs: the remain_quota that request committed is what every node admits against', async () => {
    const u = await keyedUser(nodes[0]!, 1_000_000);
    await keyEverywhere(u.key);
    ant.queue.push({ usage: { input: 0, output: 10 }, delayMs: 1_000 });
    const slow = send(node(0), u.key, msg(MODEL, { max_tokens: 10 }));
    await until('the slow request held', async () => (await redisHolds(u.id)).count === 1);
    // Admitted unlimited (its hold has no key); the key is now limited to 2 W.
    const edit = await nodes[1]!.api('PUT', '/api/token/', { id: u.keyId, unlimited_quota: false, remain_quota: 2 * W }, u.token);
    expect(edit.status).toBe(200);
    await until('the key limited on every node', () => nodes.every((n) => n.services.apiKeys.lookup(u.key)?.unlimitedQuota === false));
    // 3 W > 2 W: refused, having loaded the key's mirror (2 W) into Redis.
    expect((await send(node(1), u.key, msg(MODEL, { max_tokens: 30 }))).status).toBe(402);
    expect((await slow).status).toBe(200);
    // The commit took W off the key, as it is limited now: 1 W left, so one of two requests is served.
    const results = await Promise.all([1, 2].map((i) => send(node(i), u.key, msg(MODEL, { max_tokens: 10 }))));
    expect(results.map((r) => r.status).sort()).toEqual([200, 402]);
    const key = await nodes[0]!.db.get<{ remain_quota: number }>('select remain_quota from api_keys where id = ?', u.keyId);
    expect(Number(key!.remain_quota)).toBe(0);
  });

  test('200 concurrent requests of one user over 3 nodes while top-ups land on every node: never below 0, the mirror ends at the ledger balance', async () => {
    const u = await keyedUser(nodes[0]!, 50 * W);
    await keyEverywhere(u.key);
    const requests = Array.from({ length: 200 }, (_, i) => send(node(i), u.key, msg(MODEL, { max_tokens: 10 })));
    const topups = Array.from({ length: 10 }, async (_, i) => {
      await Bun.sleep(20 * i);
      return node(i).api('POST', '/api/ledger/adjust', { user_id: u.id, amount: 5 * W, note: `t${i}` });
    });
    const [results, adj] = await Promise.all([Promise.all(requests), Promise.all(topups)]);
    expect(adj.every((r) => r.status === 200)).toBe(true);
    const served = results.filter((r) => r.status === 200).length;
    expect(results.every((r) => r.status === 200 || r.status === 402)).toBe(true);
    // All the money can be spent, never more: at least the opening 50 W, at most the 100 W funded.
    expect(served).toBeGreaterThanOrEqual(50);
    expect(served).toBeLessThanOrEqual(100);
    const state = await ledgerState(u.id);
    expect(state).toEqual({ quota: 100 * W - served * W, ledger: 100 * W - served * W, charges: served });
    expect(await redisHolds(u.id)).toEqual({ held: 0, count: 0 });
    for (const n of nodes) expect(await n.services.backend.holds!.store.available({ userId: u.id })).toEqual({ user: state.quota, key: null });
  });

  test("a dead node's holds stop counting once the leader reconciles them; the balance equals Σ ledger", async () => {
    const u = await keyedUser(nodes[0]!, 100 * W);
    await keyEverywhere(u.key);
    expect((await send(node(2), u.key, msg(MODEL, { max_tokens: 10 }))).status).toBe(200); // loads the mirror
    const store = nodes[2]!.services.backend.holds!.store as RedisHoldStore;
    // Two requests of a node that then died: reserved (never renewed), one committed its charge, the
    // other never settled. Neither was released.
    // Long enough that the checks below run before it lapses on a loaded machine (400 ms failed once).
    const lease = 1_200;
    const charged = await store.reserve({ userId: u.id, amount: 40 * W, ref: 'dead-charged', leaseMs: lease });
    const lost = await store.reserve({ userId: u.id, amount: 49 * W, ref: 'dead-lost', leaseMs: lease });
    expect(charged.ok && lost.ok).toBe(true);
    const sink = nodes[2]!.services.backend.relay.durable as PgGroupCommitter;
    await sink.settle({
      requestId: 'dead-charged', kind: 'messages', userId: u.id, apiKeyId: u.keyId, channelId: null, model: MODEL, upstreamModel: MODEL, stream: false,
      inputTokens: 0, outputTokens: 300, cacheReadTokens: 0, cacheWriteTokens: 0, audioInputTokens: 0, audioOutputTokens: 0, cost: 30 * W,
      latencyMs: 1, ttftMs: null, status: 200, errorCode: '', attempts: 1, ip: '', createdAt: Math.floor(Date.now() / 1000),
    });
    // Held: 89 W of the 99 W left; the ledger already has the dead node's 30 W charge.
    expect((await send(node(0), u.key, msg(MODEL, { max_tokens: 10 }))).status).toBe(200);
    expect((await send(node(1), u.key, msg(MODEL, { max_tokens: 10 }))).status).toBe(402);
    expect(await redisHolds(u.id)).toEqual({ held: 89 * W, count: 2 });
    // The leases lapse, the leader's reconciler (every 250 ms) releases both with the ledger's balance.
    await until('the holds reconciled', async () => (await redisHolds(u.id)).count === 0, 5_000);
    const state = await ledgerState(u.id);
    expect(state).toEqual({ quota: 100 * W - 2 * W - 30 * W, ledger: 100 * W - 2 * W - 30 * W, charges: 3 });
    expect(await store.available({ userId: u.id })).toEqual({ user: state.quota, key: null });
    const reconciled = nodes.flatMap((n) => n.logs).filter((l) => l.includes('hold.reconciled'));
    expect(reconciled.filter((l) => /id=dead-charged .*outcome=charged/.test(l))).toHaveLength(1);
    expect(reconciled.filter((l) => /id=dead-lost .*outcome=not_charged/.test(l))).toHaveLength(1);
    // Spendable again, to the unit.
    const more = await Promise.all(Array.from({ length: 70 }, (_, i) => send(node(i), u.key, msg(MODEL, { max_tokens: 10 }))));
    expect(more.filter((r) => r.status === 200)).toHaveLength(68);
    expect(await ledgerState(u.id)).toEqual({ quota: 0, ledger: 0, charges: 71 });
  }, 30_000);

  test('Redis loses its data under load: admissions answer 503 with retry-after, live holds come back, nothing is overspent', async () => {
    const u = await keyedUser(nodes[0]!, 10 * W);
    await keyEverywhere(u.key);
    // 5 slow requests in flight (holding 5 W), spread over the nodes.
    ant.queue.push(...Array.from({ length: 5 }, () => ({ usage: { input: 0, output: 10 }, delayMs: 4_000 })));
    const slow = Array.from({ length: 5 }, (_, i) => send(node(i), u.key, msg(MODEL, { max_tokens: 10 })));
    await until('5 holds in Redis', async () => (await redisHolds(u.id)).count === 5);
    // Data loss (the prefix's keys: a FLUSHALL as far as this cluster can tell).
    const keys = await redis!.keys(`${prefix}*`);
    await redis!.del(...keys);
    const during = await send(node(1), u.key, msg(MODEL, { max_tokens: 10 }));
    expect(during.status).toBe(503);
    expect(during.body.error.type).toBe('overloaded_error');
    expect(Number(during.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    // Past the recovery window (lease/3 + 1 s), every node has put its live holds back.
    await Bun.sleep(LEASE_MS / 3 + 1_200);
    expect(await redisHolds(u.id)).toEqual({ held: 5 * W, count: 5 });
    const after = await Promise.all(Array.from({ length: 10 }, (_, i) => send(node(i), u.key, msg(MODEL, { max_tokens: 10 }))));
    expect(after.filter((r) => r.status === 200)).toHaveLength(5);
    expect((await Promise.all(slow)).map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    expect(await ledgerState(u.id)).toEqual({ quota: 0, ledger: 0, charges: 10 });
    expect(await redisHolds(u.id)).toEqual({ held: 0, count: 0 });
  }, 20_000);
});
