/**
 * The shared admission's first start. A node that finds no admission epoch in Redis waits out a recovery
 * window (503) in case Redis lost holds; a new cluster used to do the same, and answered 503 for its first
 * HOLD_LEASE_MS / 3 + 1 s. The first start on a database now claims it in PostgreSQL (migration 0013) and
 * opens the epoch at once, while a Redis data loss after that still gets its window.
 */
import { afterAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { dropSchema, freshSchema, PG_TEST_URL, requirePg } from '../helpers/postgres';
import { dropPrefix, freshPrefix, REDIS_TEST_URL, redisClient, requireRedis } from '../helpers/redis';
import { within } from '../helpers/cluster';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

const available = (await requirePg('tests/cluster/first-start.test.ts')) && (await requireRedis('tests/cluster/first-start.test.ts'));
const schema = freshSchema('gw_first_start');
const prefix = freshPrefix('first-start');
// Recovery window after a data loss: 10 s / 3 + 1 s ≈ 4.3 s, far longer than the first requests take.
const LEASE_MS = 10_000;
const MODEL = 'first';

const nodes: TestGateway[] = [];
let ant: Scripted | null = null;
const redis = available ? redisClient() : null;
const env = {
  DATABASE_URL: PG_TEST_URL, PG_SCHEMA: schema, REDIS_URL: REDIS_TEST_URL, REDIS_PREFIX: prefix,
  SECRET_KEY: Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('hex'), HOLD_LEASE_MS: String(LEASE_MS),
};

afterAll(async () => {
  for (const n of nodes.reverse()) await n.stop().catch(() => {});
  await ant?.stop();
  redis?.disconnect();
  if (available) await Promise.all([dropPrefix(prefix), dropSchema(schema)]);
});

describe.skipIf(!available)("the shared admission's first start", () => {
  test('three nodes started together on an empty database and a new prefix admit their first requests at once', async () => {
    const t0 = Date.now();
    nodes.push(...(await Promise.all([startGateway(env), startGateway(env), startGateway(env)])));
    // One start claimed the database; the epoch it opened is already due.
    expect(await nodes[0]!.db.all('select id from admission_start')).toEqual([{ id: 1 }]);
    expect(Number(await redis!.get(`${prefix}{epoch}`))).toBeLessThanOrEqual(Date.now());
    ant = upstream('anthropic', { usage: { input: 1, output: 1 } });
    await addChannel(nodes[0]!, { type: 'anthropic', url: ant.url, models: [MODEL] });
    await setPrice(nodes[0]!, MODEL);
    await within('channel and price on every node', 5_000, () => nodes.every((n) => n.services.relay.prices.get(MODEL) !== undefined
      && n.services.channelRegistry.candidates(MODEL, 'default').length > 0));
    // Each node's first request for a user loads that user's balance into Redis: the step the window blocks.
    for (const n of nodes) {
      const u = await keyedUser(n, 1_000_000);
      const r = await send(n, u.key, msg(MODEL, { max_tokens: 10 }));
      expect({ status: r.status, code: (r.body as any)?.error?.code }).toEqual({ status: 200, code: undefined });
    }
    expect(nodes.some((n) => n.logs.some((l) => l.includes('holds.recovering')))).toBe(false);
    expect(Date.now() - t0).toBeLessThan(LEASE_MS / 3 + 1_000 + 4_000);
  }, 30_000);

  test('a Redis data loss afterwards still waits out the recovery window, on a running node and on a node started then', async () => {
    expect(await dropPrefix(prefix)).toBeGreaterThan(0);
    const lost = Date.now();
    const late = await startGateway(env);
    nodes.push(late);
    expect(late.logs.some((l) => l.includes('holds.recovering'))).toBe(true);
    for (const n of [nodes[0]!, late]) {
      const u = await keyedUser(n, 1_000_000);
      await within('the key on the node', 5_000, () => n.services.apiKeys.lookup(u.key) !== undefined);
      const r = await send(n, u.key, msg(MODEL, { max_tokens: 10 }));
      expect({ status: r.status, code: (r.body as any)?.error?.code }).toEqual({ status: 503, code: 'quota_unavailable' });
      expect(Date.now() - lost).toBeLessThan(LEASE_MS / 3);
    }
    // And admission comes back once the window has passed.
    const u = await keyedUser(late, 1_000_000);
    await within('admission after the window', LEASE_MS, async () => (await send(late, u.key, msg(MODEL, { max_tokens: 10 }))).status === 200);
  }, 30_000);
});
