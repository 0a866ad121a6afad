/**
 * Concurrency limits after Redis lost its data. A key's `max_concurrency` is a set of leases in Redis; a
 * FLUSHALL (or a restart without persistence) empties it while the requests holding them still run. Holds
 * come back within the admission's recovery window (HOLD_LEASE_MS/3 + 1 s, admissions answer 503 meanwhile);
 * the leases must be back by then too, or the key runs max_concurrency more requests at once, on every node,
 * until each lease's own renewal (LIMIT_LEASE_MS/3: 40 s by default).
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { within } from '../helpers/cluster';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { dropSchema, freshSchema, PG_TEST_URL, requirePg } from '../helpers/postgres';
import { dropPrefix, freshPrefix, REDIS_TEST_URL, redisClient, requireRedis, settleAdmissionEpoch } from '../helpers/redis';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

const available = (await requirePg('tests/cluster/lease-recovery.test.ts')) && (await requireRedis('tests/cluster/lease-recovery.test.ts'));
const schema = freshSchema('gw_leases');
const prefix = freshPrefix('leases');
const HOLD_LEASE_MS = 3_000; // recovery window after a data loss: 1 s + 1 s
const MODEL = 'lease-m';

let nodes: TestGateway[] = [];
let ant: Scripted;
const redis = available ? redisClient() : null;

afterAll(async () => {
  for (const n of nodes.reverse()) await n.stop().catch(() => {});
  await ant?.stop();
  redis?.disconnect();
  if (available) await Promise.all([dropPrefix(prefix), dropSchema(schema)]);
});


describe.skipIf(!available)('concurrency leases after a Redis data loss', () => {
  beforeAll(async () => {
    await settleAdmissionEpoch(prefix);
    // LIMIT_LEASE_MS left at its default (120 s): a lease renews itself only every 40 s. The channel times out
    // at 5 s: the two slow answers (4.5 s) outlast the whole check.
    const env = {
      DATABASE_URL: PG_TEST_URL, PG_SCHEMA: schema, REDIS_URL: REDIS_TEST_URL, REDIS_PREFIX: prefix,
      SECRET_KEY: Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('hex'),
      HOLD_LEASE_MS: String(HOLD_LEASE_MS), HOLD_RECONCILE_MS: '250',
    };
    for (let i = 0; i < 3; i++) nodes.push(await startGateway(env));
    ant = upstream('anthropic', { usage: { input: 0, output: 10 } });
    await addChannel(nodes[0]!, { type: 'anthropic', url: ant.url, models: [MODEL] });
    await setPrice(nodes[0]!, MODEL, { input: 0, output: 1_000_000, cache_read: 0, cache_write: 0 });
    await within('channel and price on every node', 5_000, () => nodes.every((n) => n.services.relay.prices.get(MODEL) !== undefined
      && n.services.channelRegistry.candidates(MODEL, 'default').length > 0));
  }, 30_000);

  test('a key limited to 2 requests in flight, both running on A and B when Redis is emptied: past the recovery window C still refuses a third', async () => {
    const u = await keyedUser(nodes[0]!, 1_000_000, { max_concurrency: 2 });
    await within('the key on every node', 5_000, () => nodes.every((n) => n.services.apiKeys.lookup(u.key)?.maxConcurrency === 2));
    const leaseKey = `${prefix}{cc:lim:cc:k:${u.keyId}}`;
    ant.queue.push({ usage: { input: 0, output: 10 }, delayMs: 4_500 }, { usage: { input: 0, output: 10 }, delayMs: 4_500 });
    const slow = [send(nodes[0]!, u.key, msg(MODEL, { max_tokens: 10 })), send(nodes[1]!, u.key, msg(MODEL, { max_tokens: 10 }))];
    await within('2 leases in Redis', 5_000, async () => (await redis!.zcard(leaseKey)) === 2);
    const before = await send(nodes[2]!, u.key, msg(MODEL, { max_tokens: 10 }));
    expect([before.status, before.body.error?.code]).toEqual([429, 'key_concurrency_exceeded']);

    // Data loss: every key of the prefix (a FLUSHALL as far as this cluster can tell).
    await redis!.del(...(await redis!.keys(`${prefix}*`)));
    const during = await send(nodes[2]!, u.key, msg(MODEL, { max_tokens: 10 }));
    expect(during.status).toBe(503);
    // Past the recovery window (HOLD_LEASE_MS/3 + 1 s), admissions open again: the two running requests still count.
    await Bun.sleep(HOLD_LEASE_MS / 3 + 1_200);
    const after = await Promise.all([0, 1, 2].map((i) => send(nodes[i]!, u.key, msg(MODEL, { max_tokens: 10 }))));
    expect(after.map((r) => [r.status, r.body.error?.code])).toEqual(Array(3).fill([429, 'key_concurrency_exceeded']));
    expect(await redis!.zcard(leaseKey)).toBe(2);
    expect((await Promise.all(slow)).map((r) => r.status)).toEqual([200, 200]);
    // Both ended: their leases are gone, not left behind by a renewal.
    await within('no lease left', 5_000, async () => (await redis!.zcard(leaseKey)) === 0);
    expect((await send(nodes[2]!, u.key, msg(MODEL, { max_tokens: 10 }))).status).toBe(200);
  }, 30_000);
});
