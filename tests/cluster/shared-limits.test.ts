/**
 * Admission across 3 nodes: concurrent requests spread round-robin over the nodes may together spend
 * no more than the balance (or a limited key's remain_quota) allows, and a key's requests-per-minute
 * limit counts every node's requests in one window.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startAnthropicUpstream } from '../doubles/anthropic-upstream';
import { startCluster, type Cluster } from '../helpers/cluster';
import { requirePg } from '../helpers/postgres';
import { requireRedis } from '../helpers/redis';
import { clearOfWindowEdge } from '../helpers/window-edge';
import { REQUEST_COST, addChannel, expectConsistent, fundedUser, msg, redisHolds, send, setPrice, tally, type Sent } from './fixtures';

const ready = (await requirePg('tests/cluster/shared-limits.test.ts')) && (await requireRedis('tests/cluster/shared-limits.test.ts'));
const MODEL = 'cluster-model';
const upstream = startAnthropicUpstream({ maxRecorded: 0 });
let c: Cluster;

beforeAll(async () => {
  if (!ready) return;
  c = await startCluster();
  await addChannel(c, upstream.url, [MODEL]);
  await setPrice(c, MODEL);
}, 60_000);
afterAll(async () => {
  await c?.stop();
  await upstream.stop();
});

/** 300 requests at once, request i on node i mod 3; each upstream answer takes 200 ms so admissions overlap. */
async function burst(key: string) {
  upstream.script(() => ({ delayMs: 200, text: 'ok', usage: { input: 5, output: 10 } }));
  const nodes = c.nodes.map((n) => n.url);
  return Promise.all(Array.from({ length: 300 }, (_, i) => send(nodes[i % 3]!, key, msg(MODEL))));
}

/** Waits until every node is idle and Redis holds nothing (settlements are awaited before answers). */
async function expectNoHolds() {
  expect(await redisHolds(c)).toEqual({ held: 0, entries: 0 });
}

describe.skipIf(!ready)('no overspend across nodes', () => {
  for (const limited of [false, true]) {
    const name = limited ? 'a limited key (remain_quota for exactly 100) of a rich user' : 'a balance for exactly 100';
    let run: { userId: number; keyId: number; results: Sent[] } | null = null;
    test(`300 concurrent requests over 3 nodes against ${name}: each served request charged once, balance = ledger, no holds left`, async () => {
      const u = limited
        ? await fundedUser(c, 1_000 * REQUEST_COST, { unlimited_quota: false, remain_quota: 100 * REQUEST_COST })
        : await fundedUser(c, 100 * REQUEST_COST);
      run = { ...u, results: await burst(u.key) };
      console.log(`${name}:`, JSON.stringify(tally(run.results)));
      expect(run.results.every((r) => r.status === 200 || r.status === 402)).toBe(true);
      const m = await expectConsistent(c, u.userId);
      const served = run.results.filter((r) => r.status === 200);
      const charged = new Set(m.charges.map((r) => r.ref as string));
      expect(served.filter((r) => !charged.has(r.requestId!))).toEqual([]);
      expect(m.charges).toHaveLength(served.length);
      expect(m.usage.filter((r) => Number(r.cost) === REQUEST_COST)).toHaveLength(served.length);
      await expectNoHolds();
    }, 60_000);

    test(`… and exactly 100 are served, 200 refused (402), nothing overspent (${name})`, async () => {
      expect(run).not.toBeNull();
      expect(tally(run!.results)).toEqual({ 200: 100, 402: 200 });
      const m = await expectConsistent(c, run!.userId);
      if (limited) {
        const [k] = await c.sql`select remain_quota, used_quota from api_keys where id = ${run!.keyId}`;
        expect(Number(k!.remain_quota)).toBe(0);
        expect(Number(k!.used_quota)).toBe(100 * REQUEST_COST);
        expect(m.balance).toBe(900 * REQUEST_COST);
      } else {
        expect(m.balance).toBe(0);
      }
    }, 30_000);
  }

  test('a key limited to 30 requests per minute lets exactly 30 of 90 through across the 3 nodes', async () => {
    upstream.script(() => ({ text: 'ok', usage: { input: 5, output: 10 } }));
    const u = await fundedUser(c, 1_000 * REQUEST_COST, { rate_limit_rpm: 30 });
    const nodes = c.nodes.map((n) => n.url);
    // The 90 admissions in one clock-aligned minute of Redis's window.
    await clearOfWindowEdge(10_000);
    const results = await Promise.all(Array.from({ length: 90 }, (_, i) => send(nodes[i % 3]!, u.key, msg(MODEL))));
    expect(tally(results)).toEqual({ 200: 30, 429: 60 });
    for (const r of results.filter((x) => x.status === 429)) {
      expect(JSON.parse(r.text).error.code).toBe('key_rpm_exceeded');
      expect(Number(r.headers.get('retry-after'))).toBeGreaterThan(0);
    }
    const m = await expectConsistent(c, u.userId);
    expect(m.charges).toHaveLength(30);
  }, 60_000);
});
