/**
 * SIGTERM while the leader's reconcile pass is stuck (its query waits on a lock another session holds, as under a
 * long migration or a hung backend). The shutdown used to wait for the pass without limit, so the process never
 * exited; it now waits LEADER_STOP_GRACE_MS (5 s) for it and goes on closing, and the money settled before is intact.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startAnthropicUpstream } from '../doubles/anthropic-upstream';
import { startCluster, within, type Cluster } from '../helpers/cluster';
import { requirePg } from '../helpers/postgres';
import { requireRedis } from '../helpers/redis';
import { HEADERS, REQUEST_COST, addChannel, expectConsistent, fundedUser, msg, setPrice } from './fixtures';

const ready = (await requirePg('tests/cluster/shutdown-stuck-pass.test.ts')) && (await requireRedis('tests/cluster/shutdown-stuck-pass.test.ts'));
const MODEL = 'stuck-pass-model';
const upstream = startAnthropicUpstream({ maxRecorded: 0 });
upstream.script(() => ({ text: 'ok', usage: { input: 1, output: 10 } }));
let c: Cluster;

beforeAll(async () => {
  if (!ready) return;
  c = await startCluster({ nodes: 1, env: { HOLD_RECONCILE_MS: '200' } });
  await addChannel(c, upstream.url, [MODEL]);
  await setPrice(c, MODEL);
}, 60_000);
afterAll(async () => {
  await c?.stop();
  await upstream.stop();
});

describe.skipIf(!ready)('SIGTERM during a stuck leader pass', () => {
  test('the process exits in bounded time; what was settled stays settled', async () => {
    const node = c.nodes[0]!;
    const opening = 10 * REQUEST_COST;
    const user = await fundedUser(c, opening);
    const res = await fetch(`${node.url}/v1/messages`, { method: 'POST', headers: { ...HEADERS, 'x-api-key': user.key }, body: JSON.stringify(msg(MODEL)) });
    expect(res.status).toBe(200);
    await res.text();
    await within('the request settled', 5_000, async () => (await c.sql`select 1 from usage_logs where user_id = ${user.userId}`).length === 1);

    // Every reconcile pass ends by sweeping realtime_unfinished: with the table locked, the next pass waits there.
    let unlock!: () => void;
    const held = new Promise<void>((r) => { unlock = r; });
    let locked!: () => void;
    const isLocked = new Promise<void>((r) => { locked = r; });
    const tx = c.sql.begin(async (sql) => {
      await sql`lock table realtime_unfinished in exclusive mode`;
      locked();
      await held;
    });
    await isLocked;
    await within('a reconcile pass stuck on the lock', 10_000, async () => (await c.sql`
      select 1 from pg_stat_activity where wait_event_type = 'Lock' and query like '%realtime_unfinished%' and pid <> pg_backend_pid()`).length > 0);

    const t0 = performance.now();
    node.terminate();
    const code = await Promise.race([node.proc.exited, Bun.sleep(25_000).then(() => 'still running')]);
    const ms = performance.now() - t0;
    unlock();
    await tx;
    console.info(`exited ${code} after ${Math.round(ms)} ms`);
    expect(code).toBe(0);
    // The 5 s grace for the pass, then the pool's own 5 s to end the query still waiting, plus the rest of the stop.
    expect(ms).toBeLessThan(15_000);
    const m = await expectConsistent(c, user.userId);
    expect(m.balance).toBe(opening - REQUEST_COST);
    expect(m.usage).toHaveLength(1);
  }, 60_000);
});
