/**
 * Budgets across nodes: three in-process gateways on one PostgreSQL schema and one Redis prefix, a
 * daily budget funding exactly 20 worst cases on a user with plenty of balance. Each request costs
 * exactly its reservation (input price 0, output 1 unit per token, max_tokens 10, the upstream reports
 * 10 output tokens), so exactly 20 may be served whatever the interleaving; with a budget book per
 * process each node would admit 20 of its own. The budget's spend is the sum of its charges, no hold is
 * left, each threshold is announced once, and a budget set or cleared on one node applies on the others.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfUtcDayEnd } from '../helpers/window-edge';
import { dropSchema, freshSchema, PG_TEST_URL, requirePg } from '../helpers/postgres';
import { dropPrefix, freshPrefix, REDIS_TEST_URL, redisClient, requireRedis, settleAdmissionEpoch } from '../helpers/redis';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

const available = (await requirePg('tests/cluster/budgets.test.ts')) && (await requireRedis('tests/cluster/budgets.test.ts'));
const schema = freshSchema('gw_budgets');
const prefix = freshPrefix('budgets');
const MODEL = 'bud';
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

async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 5_000) {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(10);
  }
}

const keyEverywhere = (key: string) => until('the key on every node', () => nodes.every((n) => n.services.apiKeys.lookup(key) !== undefined));
const budgetEverywhere = (userId: number, keyId: number, n: number) =>
  until(`${n} budget(s) on every node`, () => nodes.every((g) => (g.services.relay.budgets.scopes(userId, keyId)?.length ?? 0) === n));

/** What the budget row, the usage rows, Redis and the outbox say about one user's budget. */
async function budgetState(userId: number, budgetId: number) {
  const db = nodes[0]!.db;
  const row = await db.get<{ spent: number }>('select spent from budgets where id = ?', budgetId);
  const charged = await db.get<{ s: number; n: number }>('select coalesce(sum(cost), 0) as s, count(*) as n from usage_logs where user_id = ? and cost > 0', userId);
  const alerts = await db.all<{ payload: string }>("select payload from alert_outbox where type = 'budget.threshold' order by id");
  const thresholds = alerts.map((a) => JSON.parse(a.payload).data).filter((d) => d.budget_id === budgetId).map((d) => d.threshold);
  const [held, holds] = await Promise.all([redis!.hget(`${prefix}{u:${userId}}:b:${budgetId}`, 'held'), redis!.hlen(`${prefix}{u:${userId}}:holds`)]);
  return { spent: Number(row!.spent), charged: Number(charged!.s), requests: Number(charged!.n), thresholds, held: Number(held ?? 0), holds };
}

describe.skipIf(!available)('budgets across nodes (PostgreSQL + Redis holds)', () => {
  beforeAll(async () => {
    // The budgets below are daily: every request of a test counted in one UTC day (see clearOfUtcDayEnd).
    await clearOfUtcDayEnd();
    await settleAdmissionEpoch(prefix);
    const env = {
      DATABASE_URL: PG_TEST_URL, PG_SCHEMA: schema, REDIS_URL: REDIS_TEST_URL, REDIS_PREFIX: prefix,
      SECRET_KEY: Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('hex'),
    };
    for (let i = 0; i < 3; i++) nodes.push(await startGateway(env));
    ant = upstream('anthropic', { usage: { input: 0, output: 10 }, delayMs: 100 });
    await addChannel(nodes[0]!, { type: 'anthropic', url: ant.url, models: [MODEL] });
    await setPrice(nodes[0]!, MODEL, { input: 0, output: 1_000_000, cache_read: 0, cache_write: 0 });
    await until('channel and price on every node', () => nodes.every((n) => n.services.relay.prices.get(MODEL) !== undefined
      && n.services.channelRegistry.candidates(MODEL, 'default').length > 0));
  }, 180_000);

  for (const scope of ['user', 'key'] as const) {
    test(`60 concurrent requests over 3 nodes against a ${scope} budget for exactly 20: 20 served, 40 refused (402 ${scope}_budget_exceeded), spent = Σ charges, thresholds once, no hold left`, async () => {
      const u = await keyedUser(nodes[0]!, 1_000_000);
      await keyEverywhere(u.key);
      const set = await nodes[1]!.api('PUT', '/api/budget/', { scope, subject_id: scope === 'user' ? u.id : u.keyId, period: 'daily', limit: 20 * W });
      expect(set.status).toBe(200);
      await budgetEverywhere(u.id, u.keyId, 1);
      const results = await Promise.all(Array.from({ length: 60 }, (_, i) => send(node(i), u.key, msg(MODEL, { max_tokens: 10 }))));
      expect(results.filter((r) => r.status === 200)).toHaveLength(20);
      const refused = results.filter((r) => r.status === 402);
      expect(refused).toHaveLength(40);
      expect(new Set(refused.map((r) => r.body.error.code))).toEqual(new Set([`${scope}_budget_exceeded`]));
      expect(Number(refused[0]!.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(await budgetState(u.id, set.body.data.id)).toEqual({ spent: 20 * W, charged: 20 * W, requests: 20, thresholds: [50, 80, 100], held: 0, holds: 0 });
      // Every node's view of the budget: spent, nothing held, nothing left.
      for (const n of nodes) {
        const view = await n.api('GET', `/api/budget/?scope=${scope}&subject_id=${scope === 'user' ? u.id : u.keyId}`);
        expect(view.body.data[0]).toMatchObject({ spent: 20 * W, held: 0, remaining: 0 });
      }
    }, 30_000);
  }

  test('a budget set on one node refuses on the others within 1 s; cleared, they admit again', async () => {
    const u = await keyedUser(nodes[0]!, 1_000_000);
    await keyEverywhere(u.key);
    expect((await send(node(2), u.key, msg(MODEL, { max_tokens: 10 }))).status).toBe(200);
    const t0 = performance.now();
    const set = await nodes[0]!.api('PUT', '/api/budget/', { scope: 'key', subject_id: u.keyId, period: 'daily', limit: W - 1 }, u.token);
    expect(set.status).toBe(200);
    await until('node 2 refusing', async () => (await send(node(2), u.key, msg(MODEL, { max_tokens: 10 }))).status === 402, 1_000);
    const seenMs = performance.now() - t0;
    console.log(`budget set on node 0: refused on node 2 ${seenMs.toFixed(1)} ms after the PUT was sent`);
    expect(seenMs).toBeLessThan(1_000);
    expect((await send(node(1), u.key, msg(MODEL, { max_tokens: 10 }))).body.error?.code).toBe('key_budget_exceeded');
    expect((await nodes[1]!.api('DELETE', `/api/budget/${set.body.data.id}`, undefined, u.token)).status).toBe(200);
    await until('node 2 admitting', async () => (await send(node(2), u.key, msg(MODEL, { max_tokens: 10 }))).status === 200, 1_000);
  }, 30_000);

  test('a low-balance threshold set on one node alerts once when a charge on another node crosses it', async () => {
    const u = await keyedUser(nodes[0]!, 5 * W);
    await keyEverywhere(u.key);
    expect((await nodes[2]!.api('PUT', '/api/budget/low_balance', { threshold: 3 * W }, u.token)).status).toBe(200);
    await until('the threshold on every node', () => nodes.every((n) => n.services.relay.budgets.budgetIds(u.id, u.keyId).length === 0
      && (n.services.relay.budgets as unknown as { concerns(a: number, b: number): boolean }).concerns(u.id, u.keyId)));
    const results = await Promise.all([0, 1, 2, 0].map((i) => send(node(i), u.key, msg(MODEL, { max_tokens: 10 }))));
    expect(results.every((r) => r.status === 200)).toBe(true);
    const low = (await nodes[0]!.db.all<{ payload: string }>("select payload from alert_outbox where type = 'balance.low' order by id"))
      .map((a) => JSON.parse(a.payload).data).filter((d) => d.user_id === u.id);
    expect(low).toEqual([{ user_id: u.id, threshold: 3 * W, balance: 2 * W, request_id: expect.any(String) }]);
  }, 30_000);
});
