/**
 * kill -9 of the leader itself while it relays streams: its advisory lock goes with its connection, another node
 * takes it within the followers' retry interval (5 s), and that node's leader-only jobs pick up at once: the dead
 * leader's own holds, lapsed while no node led, are reconciled (its cut streams billed once, from their
 * checkpoints) within HOLD_LEASE_MS + 5 s + HOLD_RECONCILE_MS of the kill, with the books consistent.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { leaderLockKey } from '@gw/db/pg';
import { startAnthropicUpstream } from '../doubles/anthropic-upstream';
import { startCluster, within, type Cluster } from '../helpers/cluster';
import { requirePg } from '../helpers/postgres';
import { requireRedis } from '../helpers/redis';
import { HEADERS, REQUEST_COST, addChannel, expectConsistent, fundedUser, msg, redisHolds, setPrice } from './fixtures';

const ready = (await requirePg('tests/cluster/leader-kill.test.ts')) && (await requireRedis('tests/cluster/leader-kill.test.ts'));
const MODEL = 'leader-kill-model';
const LEASE_MS = 3_000;
const RECONCILE_MS = 500;
const upstream = startAnthropicUpstream({ maxRecorded: 0 });
// About 6 s per stream (one frame every 300 ms): still running when its node is killed.
upstream.script(() => ({ text: Array.from({ length: 20 }, (_, i) => `w${i}`).join(' '), chunkDelayMs: 300, usage: { input: 1, output: 10 } }));
let c: Cluster;

beforeAll(async () => {
  if (!ready) return;
  c = await startCluster({ env: { LIMIT_LEASE_MS: String(LEASE_MS), HOLD_LEASE_MS: String(LEASE_MS), HOLD_RECONCILE_MS: String(RECONCILE_MS) } });
  await addChannel(c, upstream.url, [MODEL]);
  await setPrice(c, MODEL);
}, 60_000);
afterAll(async () => {
  await c?.stop();
  await upstream.stop();
});

/** The index of the node holding the jobs' advisory lock (its connection names its pid), or -1. */
async function leaderIndex(): Promise<number> {
  const rows = await c.sql<{ app: string }[]>`
    select a.application_name as app from pg_locks l join pg_stat_activity a on a.pid = l.pid
    where l.locktype = 'advisory' and l.granted and l.objid = ${leaderLockKey(`gw:${c.schema}:jobs`)}::oid and l.objsubid = 2`;
  const pid = Number(/^gateway-leader-(\d+)$/.exec(rows[0]?.app ?? '')?.[1]);
  return c.nodes.findIndex((n) => n.proc.pid === pid);
}

async function stream(node: number, key: string): Promise<void> {
  try {
    const res = await fetch(`${c.nodes[node]!.url}/v1/messages`, { method: 'POST', headers: { ...HEADERS, 'x-api-key': key }, body: JSON.stringify(msg(MODEL, { stream: true })) });
    await res.text();
  } catch { /* cut by the kill */ }
}

describe.skipIf(!ready)('kill -9 of the leader', () => {
  test('another node leads within the retry interval and reconciles the dead leader\'s holds at once; billed once', async () => {
    await within('one leader', 15_000, async () => (await leaderIndex()) >= 0);
    const old = await leaderIndex();
    const user = await fundedUser(c, 20 * REQUEST_COST);
    const streams = Array.from({ length: 3 }, () => stream(old, user.key));
    await within('3 holds in Redis', 5_000, async () => (await redisHolds(c)).entries === 3);
    // Past each stream's first second: each keeps a checkpoint the next leader must bill.
    await Bun.sleep(1_500);
    const t0 = performance.now();
    await c.nodes[old]!.kill9();
    await Promise.all(streams);
    const led = await within('another node leads', 5_000 + 2_000, async () => ![-1, old].includes(await leaderIndex()));
    const fresh = await leaderIndex();
    await within('the dead leader\'s holds reconciled', LEASE_MS + 5_000 + RECONCILE_MS + 3_000, async () => {
      const h = await redisHolds(c);
      return h.held === 0 && h.entries === 0;
    });
    const cleared = performance.now() - t0;
    console.log(`node ${fresh} leads ${Math.round(led)} ms after the kill; the dead leader's holds were reconciled ${Math.round(cleared)} ms after it`);
    expect(c.nodes[fresh]!.output()).toContain('hold.reconciled');
    const m = await expectConsistent(c, user.userId);
    // Each cut stream billed once, from its checkpoint, never above its hold.
    expect(m.usage.length).toBe(3);
    expect(m.charges.length).toBe(3);
    expect(m.usage.every((r) => Number(r.cost) > 0 && Number(r.cost) <= REQUEST_COST)).toBe(true);
  }, 60_000);
});
