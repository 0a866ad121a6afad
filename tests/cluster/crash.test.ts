/**
 * kill -9 of one node while it relays streams and the other nodes serve traffic for the same user:
 * every request a client saw complete is billed exactly once, nothing is billed twice (also after the
 * killed node restarts), and the killed node's in-flight holds stop counting, so what is left of the
 * balance can be spent in full on the surviving nodes.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startAnthropicUpstream } from '../doubles/anthropic-upstream';
import { startCluster, within, type Cluster } from '../helpers/cluster';
import { requirePg } from '../helpers/postgres';
import { requireRedis } from '../helpers/redis';
import { HEADERS, REQUEST_COST, addChannel, expectConsistent, fundedUser, msg, redisHolds, send, setPrice } from './fixtures';

const ready = (await requirePg('tests/cluster/crash.test.ts')) && (await requireRedis('tests/cluster/crash.test.ts'));
const MODEL = 'crash-model';
const upstream = startAnthropicUpstream({ maxRecorded: 0 });
// "slow" streams last about 4 s (one frame every 200 ms); everything else answers at once.
upstream.script((req) => (JSON.stringify(req.body?.messages ?? '').includes('slow')
  ? { text: Array.from({ length: 20 }, (_, i) => `w${i}`).join(' '), chunkDelayMs: 200, usage: { input: 1, output: 10 } }
  : { text: 'ok', usage: { input: 1, output: 10 } }));
let c: Cluster;

beforeAll(async () => {
  if (!ready) return;
  // Short leases, so a dead node's slots and holds lapse (and the leader reconciles them) within the test.
  c = await startCluster({ env: { LIMIT_LEASE_MS: '3000', HOLD_LEASE_MS: '3000', HOLD_RECONCILE_MS: '500' } });
  await addChannel(c, upstream.url, [MODEL]);
  await setPrice(c, MODEL);
}, 60_000);
afterAll(async () => {
  await c?.stop();
  await upstream.stop();
});

interface Outcome { node: number; requestId: string | null; completed: boolean }

/** A stream read to its end; complete only when message_stop arrived and the body ended cleanly. */
async function stream(node: number, key: string, content: string): Promise<Outcome> {
  try {
    const res = await fetch(`${c.nodes[node]!.url}/v1/messages`, { method: 'POST', headers: { ...HEADERS, 'x-api-key': key }, body: JSON.stringify(msg(MODEL, { stream: true, messages: [{ role: 'user', content }] })) });
    const requestId = res.headers.get('request-id');
    try {
      const text = await res.text();
      return { node, requestId, completed: res.status === 200 && text.includes('event: message_stop') && !text.includes('event: error') };
    } catch {
      return { node, requestId, completed: false };
    }
  } catch {
    return { node, requestId: null, completed: false };
  }
}

async function quick(node: number, key: string): Promise<Outcome> {
  try {
    const r = await send(c.nodes[node]!.url, key, msg(MODEL));
    return { node, requestId: r.requestId, completed: r.status === 200 && JSON.parse(r.text).type === 'message' };
  } catch {
    return { node, requestId: null, completed: false };
  }
}

let user: { userId: number; key: string };
let completed: Outcome[] = [];

/** Balance = Σ ledger, unique rows, and each completed request has one usage row at full cost and one charge. */
async function check() {
  const m = await expectConsistent(c, user.userId);
  const usage = new Map(m.usage.map((r) => [r.request_id as string, Number(r.cost)]));
  const charged = new Set(m.charges.map((r) => r.ref as string));
  expect(completed.filter((o) => usage.get(o.requestId!) !== REQUEST_COST || !charged.has(o.requestId!))).toEqual([]);
  return m;
}

describe.skipIf(!ready)('kill -9 of a node mid-stream', () => {
  test('every request a client saw complete is billed exactly once; a restart of the killed node bills nothing again', async () => {
    // Enough for everything below (at most 46 requests), so no refusal blurs the picture.
    user = await fundedUser(c, 100 * REQUEST_COST);
    const slowOnB = Array.from({ length: 6 }, () => stream(1, user.key, 'slow'));
    const slowElsewhere = [0, 0, 2, 2].map((n) => stream(n, user.key, 'slow'));
    // Quick requests on every node, one after another, while the slow streams run and B dies.
    const quickLoops = [0, 1, 2].map(async (n) => {
      const out: Outcome[] = [];
      for (let i = 0; i < 6; i++) {
        out.push(await quick(n, user.key), await stream(n, user.key, 'fast'));
        await Bun.sleep(100);
      }
      return out;
    });
    await Bun.sleep(800);
    await c.nodes[1]!.kill9();
    const outcomes = [...await Promise.all([...slowOnB, ...slowElsewhere]), ...(await Promise.all(quickLoops)).flat()];
    completed = outcomes.filter((o) => o.completed);
    // The kill cut B's slow streams; the other slow streams and A's and C's quick requests finished.
    expect(outcomes.slice(0, 6).filter((o) => o.completed)).toHaveLength(0);
    expect(outcomes.slice(6, 10).every((o) => o.completed)).toBe(true);
    expect(outcomes.slice(10).filter((o) => o.node !== 1 && !o.completed)).toEqual([]);
    // The dead node's holds lapse and the leader settles them (billing a cut stream that had run past its first
    // second and kept a checkpoint) before the picture is taken: the restart below must add nothing to it.
    await within('the dead node\'s holds reconciled', 30_000, async () => {
      const h = await redisHolds(c);
      return h.held === 0 && h.entries === 0;
    });
    const before = await check();
    // Cut streams are billed at most once (checked above: unique ids), never more than their hold.
    expect(before.usage.every((r) => Number(r.cost) <= REQUEST_COST)).toBe(true);

    await c.restart(1);
    await Bun.sleep(500);
    const after = await check();
    expect(after.charges.length).toBe(before.charges.length);
    expect(after.balance).toBe(before.balance);
  }, 90_000);

  test("the killed node's holds stop counting: what is left is spendable in full on the other nodes, not a unit more", async () => {
    const cleared = await within('no holds left in Redis', 30_000, async () => {
      const h = await redisHolds(c);
      return h.held === 0 && h.entries === 0;
    });
    console.log(`no holds in Redis ${Math.round(cleared)} ms after the kill test ended`);
    const left = (await check()).balance;
    const affordable = Math.floor(left / REQUEST_COST);
    expect(affordable).toBeGreaterThan(10);
    const results = await Promise.all(Array.from({ length: affordable + 10 }, (_, i) => send(c.nodes[i % 2 === 0 ? 0 : 2]!.url, user.key, msg(MODEL))));
    expect(results.filter((r) => r.status === 200)).toHaveLength(affordable);
    const m = await check();
    expect(m.balance).toBe(left - affordable * REQUEST_COST);
  }, 60_000);
});
