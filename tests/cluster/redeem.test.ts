/**
 * Redemption attempts across 3 nodes. A user's attempts run one at a time in the whole cluster (a short Redis lock per
 * user on top of each node's own queue), so a success clears the failure count before the next attempt claims its
 * place. Per node only, 3 nodes ran 3 attempts of one user at once, and with REDEEM_MAX_FAILURES below 3 the attempts in
 * flight filled the window before any success cleared it: valid codes sent in parallel were refused with 429.
 * Guesses stay bounded by the shared window however they are spread over the nodes.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startCluster, CLUSTER_ROOT_PASSWORD, type Cluster } from '../helpers/cluster';
import { loginToken } from '../helpers/gateway-process';
import { requirePg } from '../helpers/postgres';
import { requireRedis } from '../helpers/redis';
import { expectConsistent, tally } from './fixtures';

const ready = (await requirePg('tests/cluster/redeem.test.ts')) && (await requireRedis('tests/cluster/redeem.test.ts'));
let c: Cluster;

beforeAll(async () => {
  if (!ready) return;
  c = await startCluster({ env: { REDEEM_MAX_FAILURES: '2', REDEEM_FAILURE_WINDOW_SECONDS: '600' } });
}, 60_000);
afterAll(async () => { await c?.stop(); });

async function userWithToken(): Promise<{ id: number; token: string }> {
  const username = `r${crypto.randomUUID().slice(0, 8)}`;
  const u = await c.api(0, 'POST', '/api/user/', { username, password: 'cluster-user-pw-1' });
  if (u.status !== 200) throw new Error(`user: ${u.status} ${JSON.stringify(u.body)}`);
  return { id: u.body.data.id as number, token: await loginToken(c.nodes[0]!.url, username, 'cluster-user-pw-1') };
}

async function mint(count: number, quota: number): Promise<string[]> {
  const r = await c.api(0, 'POST', '/api/redemption/', { batch: `b-${crypto.randomUUID().slice(0, 8)}`, count, quota, expires_at: Math.floor(Date.now() / 1000) + 3600 });
  expect(r.status).toBe(200);
  return r.body.data.codes as string[];
}

const redeem = (node: number, code: string, token: string) => c.api(node, 'POST', '/api/user/redeem', { code }, token);

describe.skipIf(!ready)('redemption attempts of one user across nodes', () => {
  test('12 valid codes sent at once over 3 nodes with REDEEM_MAX_FAILURES 2: all credited, none refused', async () => {
    const user = await userWithToken();
    const codes = await mint(12, 1000);
    const results = await Promise.all(codes.map((code, i) => redeem(i % 3, code, user.token)));
    expect(tally(results)).toEqual({ 200: 12 });
    const m = await expectConsistent(c, user.id);
    expect(m.balance).toBe(12_000);
  }, 60_000);

  test('30 guesses at once over 3 nodes: 2 evaluated, the rest 429; a valid code afterwards is refused too', async () => {
    const user = await userWithToken();
    const guesses = Array.from({ length: 30 }, () => `gwr_${crypto.randomUUID().replace(/-/g, '').slice(0, 24)}`);
    const results = await Promise.all(guesses.map((g, i) => redeem(i % 3, g, user.token)));
    expect(tally(results)).toEqual({ 400: 2, 429: 28 });
    const [code] = await mint(1, 1000);
    expect((await redeem(1, code!, user.token)).status).toBe(429);
  }, 60_000);
});
