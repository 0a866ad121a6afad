/**
 * A /v1/messages stream on a node killed with SIGKILL is billed once (PostgreSQL mode): a stream that has run for a
 * second keeps a checkpoint under its hold's ref, refreshed every second; once the dead node's hold lapses the leader
 * bills it, exactly as a client leaving at that point is billed, before releasing the hold. While the node lives the
 * checkpoint is never billed. The SQLite twin: tests/e2e/messages-crash.test.ts.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startAnthropicUpstream } from '../doubles/anthropic-upstream';
import { startCluster, within, type Cluster } from '../helpers/cluster';
import { requirePg } from '../helpers/postgres';
import { holdStreams, streamUntilPause } from '../helpers/held-stream';
import { requireRedis } from '../helpers/redis';
import { expectConsistent, fundedUser, redisHolds } from './fixtures';

const ready = (await requirePg('tests/cluster/messages-crash.test.ts')) && (await requireRedis('tests/cluster/messages-crash.test.ts'));
const LEASE_MS = 3_000;
const RECONCILE_MS = 300;
const BALANCE = 50_000_000;
const up = startAnthropicUpstream();
holdStreams(up);
let c: Cluster;

beforeAll(async () => {
  if (!ready) return;
  c = await startCluster({ nodes: 2, env: { HOLD_LEASE_MS: String(LEASE_MS), HOLD_RECONCILE_MS: String(RECONCILE_MS), LIMIT_LEASE_MS: '3000' } });
  expect((await c.api(0, 'POST', '/api/channel/', { name: 'up', type: 'anthropic', base_url: up.url, key: 'up-key-1', models: ['claude-crash'] })).status).toBe(200);
  expect((await c.api(0, 'PUT', '/api/pricing/', { model: 'claude-crash', input: 3_000_000, output: 15_000_000 })).status).toBe(200);
}, 60_000);
afterAll(async () => {
  await c?.stop();
  await up.stop();
});

const usage = (userId: number) => c.sql<{ request_id: string; cost: string; output_tokens: string; input_tokens: string; usage_flag: string; error_code: string }[]>`
  select request_id, cost, output_tokens, input_tokens, usage_flag, error_code from usage_logs where user_id = ${userId} order by id`;
const checkpoints = () => c.sql<{ request_id: string; hold_ref: string }[]>`select request_id, hold_ref from realtime_unfinished order by request_id`;


describe.skipIf(!ready)('a /v1/messages stream of a node killed mid-stream', () => {
  test('billed once by the leader after its lease lapsed, as a client leaving then would be; never while the node lives', async () => {
    const u = await fundedUser(c, BALANCE);
    // The yardstick: the same stream left by its client at the same point.
    const left = await streamUntilPause(c.nodes[1]!.url, u.key, 'claude-crash', 'hold left');
    await left.cancel();
    await within('the left stream settled', 5_000, async () => (await usage(u.userId)).length === 1);
    const [leftRow] = await usage(u.userId);
    expect(leftRow!.error_code).toBe('client_closed');

    await streamUntilPause(c.nodes[1]!.url, u.key, 'claude-crash', 'hold crash');
    await within('one checkpoint', 5_000, async () => (await checkpoints()).length === 1);
    const [kept] = await checkpoints();
    expect(kept!.hold_ref).toBe(kept!.request_id);
    // The node lives on past a lease: its hold is renewed, its checkpoint never billed.
    await Bun.sleep(LEASE_MS + 3 * RECONCILE_MS);
    expect((await usage(u.userId)).length).toBe(1);
    expect((await checkpoints()).length).toBe(1);

    const killedAt = performance.now();
    await c.nodes[1]!.kill9();
    await within('the cut stream billed', LEASE_MS + 10_000, async () => (await usage(u.userId)).length === 2);
    console.log(`cut stream billed ${Math.round(performance.now() - killedAt)} ms after the kill (lease ${LEASE_MS} ms)`);
    const rows = await usage(u.userId);
    const cut = rows.find((r) => r.error_code === 'gateway_crashed')!;
    expect(cut.request_id).toBe(kept!.request_id);
    expect([cut.input_tokens, cut.output_tokens, cut.cost, cut.usage_flag]).toEqual([leftRow!.input_tokens, leftRow!.output_tokens, leftRow!.cost, leftRow!.usage_flag]);
    const m = await expectConsistent(c, u.userId);
    expect(m.balance).toBe(BALANCE - rows.reduce((n, r) => n + Number(r.cost), 0));
    expect(m.charges).toHaveLength(2);
    await within('no checkpoint left', 2_000, async () => (await checkpoints()).length === 0);
    await within('no hold left in Redis', 5_000, async () => {
      const h = await redisHolds(c);
      return h.held === 0 && h.entries === 0;
    });
    // A node started again on the database bills nothing more.
    await c.restart(1);
    await Bun.sleep(LEASE_MS);
    expect((await usage(u.userId)).length).toBe(2);
  }, 90_000);
});
