/**
 * A budget set on node A reaches node B through the change feed, and B re-reads its budget book. When that read
 * fails (the database refused it for a moment), B must read again soon: until then B admits the user's requests
 * without the budget (a spending cap an attacker holding the key can run past on B), and before this test it
 * did so until the next periodic resync (CHANGE_FEED_RESYNC_MS, 30 s by default).
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { within } from '../helpers/cluster';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfUtcDayEnd } from '../helpers/window-edge';
import { dropSchema, freshSchema, PG_TEST_URL, requirePg } from '../helpers/postgres';
import { dropPrefix, freshPrefix, REDIS_TEST_URL, requireRedis, settleAdmissionEpoch } from '../helpers/redis';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

const available = (await requirePg('tests/cluster/budget-reload-retry.test.ts')) && (await requireRedis('tests/cluster/budget-reload-retry.test.ts'));
const schema = freshSchema('gw_budget_retry');
const prefix = freshPrefix('budget-retry');
const MODEL = 'budget-retry-m';

const nodes: TestGateway[] = [];
let ant: Scripted | null = null;

afterAll(async () => {
  for (const n of nodes.reverse()) await n.stop().catch(() => {});
  await ant?.stop();
  if (available) await Promise.all([dropPrefix(prefix), dropSchema(schema)]);
});


describe.skipIf(!available)('a budget book read that fails on another node', () => {
  beforeAll(async () => {
    // The budget below is daily: its refusal must not meet a new UTC day (see clearOfUtcDayEnd).
    await clearOfUtcDayEnd(60_000);
    await settleAdmissionEpoch(prefix);
    const env = {
      DATABASE_URL: PG_TEST_URL, PG_SCHEMA: schema, REDIS_URL: REDIS_TEST_URL, REDIS_PREFIX: prefix,
      SECRET_KEY: 'ab'.repeat(32), CHANGE_FEED_RESYNC_MS: '60000',
    };
    for (let i = 0; i < 2; i++) nodes.push(await startGateway(env));
    ant = upstream('anthropic', { usage: { input: 0, output: 10 } });
    await addChannel(nodes[0]!, { type: 'anthropic', url: ant.url, models: [MODEL] });
    await setPrice(nodes[0]!, MODEL, { input: 0, output: 1_000_000, cache_read: 0, cache_write: 0 });
    await within('channel and price on both nodes', 5_000, () => nodes.every((n) => n.services.relay.prices.get(MODEL) !== undefined
      && n.services.channelRegistry.candidates(MODEL, 'default').length > 0));
  }, 100_000);

  test("is read again within a second: B refuses over the budget A set, not only after the next resync", async () => {
    const [a, b] = [nodes[0]!, nodes[1]!];
    const u = await keyedUser(a, 1_000_000);
    await within('the key on B', 5_000, () => b.services.apiKeys.lookup(u.key) !== undefined);
    expect((await send(b, u.key, msg(MODEL, { max_tokens: 10 }))).status).toBe(200);
    // B's next read of the budget book is refused once.
    const repo = b.services.relay.budgetsRepo as { all: () => unknown };
    const all = repo.all.bind(repo);
    let refusals = 1;
    repo.all = () => (refusals-- > 0 ? Promise.reject(new Error('sorry, too many clients already (test)')) : all());
    // A daily budget of 5 units: less than one request's worst case (10).
    expect((await a.api('PUT', '/api/budget/', { scope: 'user', subject_id: u.id, period: 'daily', limit: 5 })).status).toBe(200);
    await within('the refused read', 5_000, () => refusals < 0 || b.logs.some((l) => l.includes('budgets.reload_failed')));
    await within('B refuses over the budget', 2_000, async () => {
      const r = await send(b, u.key, msg(MODEL, { max_tokens: 10 }));
      return r.status === 402 && r.body.error?.code === 'user_budget_exceeded';
    });
  }, 20_000);
});
