/**
 * Realtime metering survives a node's death (PostgreSQL mode): a node killed with SIGKILL while realtime responses
 * run leaves their checkpoints (realtime_unfinished, under their holds' refs); once its holds' lease lapses the
 * leader bills each cut response once, on the estimate of what it had relayed, before releasing its hold. While the
 * node lives its checkpoints are never billed, a response settled before the kill is not billed again (nor its
 * checkpoint, left by a delete the kill lost), the holds are gone, and a restart of the node bills nothing more.
 * The SQLite twin: tests/e2e/realtime-crash.test.ts.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { costOf } from '@gw/core';
import { RealtimeTestClient, startRealtimeUpstream } from '../doubles/realtime-upstream';
import { startCluster, within, type Cluster } from '../helpers/cluster';
import { requirePg } from '../helpers/postgres';
import { requireRedis } from '../helpers/redis';
import { PRICE, SAMPLE_COST, bearerOf, leaveResponsesRunning, type OpenSession } from '../helpers/realtime-wiring';
import { expectConsistent, fundedUser, redisHolds } from './fixtures';

const ready = (await requirePg('tests/cluster/realtime-crash.test.ts')) && (await requireRedis('tests/cluster/realtime-crash.test.ts'));
const LEASE_MS = 3_000;
const RECONCILE_MS = 300;
const BALANCE = 50_000_000;
const up = startRealtimeUpstream();
const clients: RealtimeTestClient[] = [];
let c: Cluster;

beforeAll(async () => {
  if (!ready) return;
  c = await startCluster({ nodes: 2, env: { REALTIME_DEFAULT_MODEL: 'gpt-realtime', HOLD_LEASE_MS: String(LEASE_MS), HOLD_RECONCILE_MS: String(RECONCILE_MS), LIMIT_LEASE_MS: '3000' } });
  expect((await c.api(0, 'POST', '/api/channel/', { name: 'rt', type: 'openai', base_url: up.url, key: 'up-key-1', models: ['gpt-realtime'] })).status).toBe(200);
  expect((await c.api(0, 'PUT', '/api/pricing/', { ...PRICE, cache_write: 0 })).status).toBe(200);
}, 60_000);
afterAll(async () => {
  for (const x of clients) if (x.ws.readyState <= 1) x.ws.close();
  await c?.stop();
  await up.stop();
});

async function connect(node: number, key: string): Promise<OpenSession> {
  const x = new RealtimeTestClient(`${c.nodes[node]!.url.replace('http://', 'ws://')}/v1/realtime?model=gpt-realtime`, bearerOf(key));
  clients.push(x);
  await x.opened;
  await x.waitFor('session.created');
  return { c: x, conn: up.connections.at(-1)!.id };
}

const usage = (userId: number) => c.sql<{ request_id: string; cost: string; output_tokens: string; input_tokens: string; audio_input_tokens: string; usage_flag: string; error_code: string }[]>`
  select request_id, cost, output_tokens, input_tokens, audio_input_tokens, usage_flag, error_code from usage_logs where user_id = ${userId} order by id`;
const checkpoints = () => c.sql<{ request_id: string; hold_ref: string }[]>`select request_id, hold_ref from realtime_unfinished order by request_id`;
const suffix = (requestId: string) => requestId.split('_').slice(2).join('_');

describe.skipIf(!ready)('realtime responses of a node killed mid-response', () => {
  test('billed once after its lease lapsed, by the leader, before the hold is released; never while the node lives; the settled one not again', async () => {
    const u = await fundedUser(c, BALANCE);
    // On node 1, session 1: a response completed (settled before the kill), then one cut by the kill after all its
    // output; session 2: a response the upstream started itself (server VAD), its hold granted after the frame.
    const { s1, cutId } = await leaveResponsesRunning(up, () => connect(1, u.key));

    // Checkpoints written off the request path, under the refs of the responses' holds (`<session>#<n>`).
    await within('two checkpoints', 5_000, async () => (await checkpoints()).length === 2);
    // The three deltas came in one burst: the first was checkpointed at once, the rest within a second.
    await Bun.sleep(1_500);
    const kept = await checkpoints();
    expect(kept.map((r) => suffix(r.request_id)).sort()).toEqual([cutId, 'resp_vad_kill'].sort());
    for (const r of kept) expect(r.hold_ref).toMatch(new RegExp(`^${r.request_id.split('_').slice(0, 2).join('_')}#\\d+$`));
    const [settled] = await usage(u.userId);
    expect([suffix(settled!.request_id), Number(settled!.cost)]).toEqual(['resp_1', SAMPLE_COST]);
    // A checkpoint of the settled response, as a kill between its settlement's commit and the delete leaves one.
    await c.sql`insert into realtime_unfinished (request_id, hold_ref, row, updated_at)
      values (${settled!.request_id}, 'gone#1', ${JSON.stringify({ requestId: settled!.request_id, userId: u.userId, apiKeyId: u.keyId, cost: 999 })}, 0)`;

    // The node lives on past a lease: its holds are renewed, its checkpoints never billed.
    await Bun.sleep(LEASE_MS + 3 * RECONCILE_MS);
    expect((await usage(u.userId)).length).toBe(1);
    expect((await checkpoints()).map((r) => r.request_id)).toEqual(expect.arrayContaining(kept.map((r) => r.request_id)));

    const killedAt = performance.now();
    await c.nodes[1]!.kill9();
    await s1.c.waitClose();
    const billedAfter = await within('the cut responses billed', LEASE_MS + 10_000, async () => (await usage(u.userId)).length === 3);
    console.log(`cut responses billed ${Math.round(performance.now() - killedAt)} ms after the kill (lease ${LEASE_MS} ms, reconcile every ${RECONCILE_MS} ms; waited ${Math.round(billedAfter)} ms)`);

    const check = async () => {
      const rows = await usage(u.userId);
      const byId = (s: string) => rows.filter((r) => suffix(r.request_id) === s);
      expect(rows).toHaveLength(3);
      expect(byId('resp_1').map((r) => [Number(r.cost), r.usage_flag, r.error_code])).toEqual([[SAMPLE_COST, '', '']]);
      // The cut response: its three deltas ("Hello", " from", " the double": 2 + 2 + 3 tokens) and an input bound.
      const [cut] = byId(cutId);
      expect([Number(cut!.output_tokens), cut!.usage_flag, cut!.error_code]).toEqual([7, 'estimated', 'gateway_crashed']);
      expect(Number(cut!.input_tokens)).toBeGreaterThan(1024);
      expect(Number(cut!.input_tokens)).toBeLessThan(PRICE.context_window);
      expect(Number(cut!.audio_input_tokens)).toBe(82);
      expect(Number(cut!.cost)).toBe(costOf([[Number(cut!.input_tokens), PRICE.input], [82, PRICE.audio_input], [7, PRICE.output]]));
      // The upstream's own response, no output relayed: its input, nothing else.
      const [vad] = byId('resp_vad_kill');
      expect([Number(vad!.output_tokens), vad!.usage_flag, vad!.error_code]).toEqual([0, 'estimated', 'gateway_crashed']);
      expect(Number(vad!.cost)).toBe(costOf([[Number(vad!.input_tokens), PRICE.input], [Number(vad!.audio_input_tokens), PRICE.audio_input]]));
      const total = rows.reduce((n, r) => n + Number(r.cost), 0);
      const m = await expectConsistent(c, u.userId);
      expect(m.balance).toBe(BALANCE - total);
      expect(m.charges).toHaveLength(3);
      return total;
    };
    const total = await check();
    // Every checkpoint is gone: the two billed, the settled one's deleted without a charge.
    await within('no checkpoint left', 2_000, async () => (await checkpoints()).length === 0);
    await within('no hold left in Redis', 5_000, async () => {
      const h = await redisHolds(c);
      return h.held === 0 && h.entries === 0;
    });
    // A node started again on the database bills nothing more.
    await c.restart(1);
    await Bun.sleep(LEASE_MS);
    expect(await check()).toBe(total);
    expect(c.nodes.every((n) => !n.output().includes('settlement.unfinished_failed'))).toBe(true);
  }, 90_000);
});
