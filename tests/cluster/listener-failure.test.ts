/**
 * A user disabled through node A stops the stream its key runs on node B at once, even while another of B's caches
 * (here the balance mirror of the quota) fails to refresh on that same change and on every resync. B's change
 * listeners run one after another; before, the first one to fail stopped the event there, so the in-flight guard
 * (registered last) never heard it, and the stream ran on until a resync succeeded.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startAnthropicUpstream } from '../doubles/anthropic-upstream';
import { within } from '../helpers/cluster';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { dropSchema, freshSchema, PG_TEST_URL, requirePg } from '../helpers/postgres';
import { dropPrefix, freshPrefix, REDIS_TEST_URL, requireRedis, settleAdmissionEpoch } from '../helpers/redis';
import { keyedUser, msg, setPrice } from '../e2e/relay-setup';

const available = (await requirePg('tests/cluster/listener-failure.test.ts')) && (await requireRedis('tests/cluster/listener-failure.test.ts'));
const schema = freshSchema('gw_listener_fail');
const prefix = freshPrefix('listener-fail');
const MODEL = 'listener-fail-m';

const nodes: TestGateway[] = [];
const slow = startAnthropicUpstream({ maxRecorded: 0 });
// About 5 s of stream: one frame every 100 ms.
slow.script(() => ({ text: Array.from({ length: 50 }, (_, i) => `w${i}`).join(' '), chunkDelayMs: 100, usage: { input: 1, output: 10 } }));

afterAll(async () => {
  for (const n of nodes.reverse()) await n.stop().catch(() => {});
  await slow.stop();
  if (available) await Promise.all([dropPrefix(prefix), dropSchema(schema)]);
});


describe.skipIf(!available)('a change listener that fails on another node', () => {
  beforeAll(async () => {
    await settleAdmissionEpoch(prefix);
    const env = {
      DATABASE_URL: PG_TEST_URL, PG_SCHEMA: schema, REDIS_URL: REDIS_TEST_URL, REDIS_PREFIX: prefix,
      SECRET_KEY: 'ab'.repeat(32), CHANGE_FEED_RESYNC_MS: '60000',
    };
    for (let i = 0; i < 2; i++) nodes.push(await startGateway(env));
    const r = await nodes[0]!.api('POST', '/api/channel/', { name: 'slow', type: 'anthropic', base_url: slow.url, key: 'k-1', models: [MODEL], timeout_ms: 10_000 });
    expect(r.status).toBe(200);
    await setPrice(nodes[0]!, MODEL);
    await within('channel and price on both nodes', 5_000, () => nodes.every((n) => n.services.relay.prices.get(MODEL) !== undefined
      && n.services.channelRegistry.candidates(MODEL, 'default').length > 0));
  }, 30_000);

  test('does not keep the in-flight guard from the change: a disabled user\'s stream on B ends within 1 s', async () => {
    const [a, b] = [nodes[0]!, nodes[1]!];
    const u = await keyedUser(a, 1_000_000);
    await within('the key on B', 5_000, () => b.services.apiKeys.lookup(u.key) !== undefined);
    const res = await fetch(`${b.url}/v1/messages`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', 'x-api-key': u.key },
      body: JSON.stringify(msg(MODEL, { max_tokens: 100, stream: true })),
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let text = dec.decode((await reader.read()).value);
    // From now on B's quota cannot re-read balances: neither the one user's (the change) nor all (the resync).
    const quota = b.services.relay.quota as unknown as { reloadBalance: (id: number) => Promise<void>; reloadBalances: () => Promise<void> };
    let refused = 0;
    quota.reloadBalance = () => { refused++; return Promise.reject(new Error('sorry, too many clients already (test)')); };
    quota.reloadBalances = () => { refused++; return Promise.reject(new Error('sorry, too many clients already (test)')); };
    const t0 = performance.now();
    expect((await a.api('POST', `/api/user/${u.id}/disable`)).status).toBe(200);
    for (;;) {
      const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }));
      if (done) break;
      text += dec.decode(value);
    }
    const ended = performance.now() - t0;
    expect(refused).toBeGreaterThan(0);
    expect(ended).toBeLessThan(1_000);
    expect(text).toContain('event: error');
    expect(text).toContain('The owner of this API key was disabled');
    expect(text).not.toContain('message_stop');
    await within('the failure logged', 5_000, () => b.logs.some((l) => l.includes('change_feed.listener_failed')));
  }, 20_000);
});
