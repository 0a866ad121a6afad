/**
 * Login lockout across nodes. A stored account counts its failures in its row, so its lockout is the
 * cluster's; an unknown username must lock out after the same number of failures, wherever they
 * landed, or the difference tells an attacker behind a load balancer which names exist.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startCluster, type Cluster } from '../helpers/cluster';
import { requirePg } from '../helpers/postgres';
import { requireRedis } from '../helpers/redis';
import { fundedUser } from './fixtures';

const ready = (await requirePg('tests/cluster/login.test.ts')) && (await requireRedis('tests/cluster/login.test.ts'));
let c: Cluster;

beforeAll(async () => {
  if (!ready) return;
  c = await startCluster({ env: { LOGIN_MAX_FAILURES: '3', LOGIN_LOCK_SECONDS: '30' } });
}, 60_000);
afterAll(async () => {
  await c?.stop();
});

/** Six wrong logins, attempt i on node i mod 3: status and error code of each. */
async function transcript(username: string) {
  const out: Array<[number, string]> = [];
  for (let i = 0; i < 6; i++) {
    const res = await fetch(`${c.nodes[i % 3]!.url}/api/user/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username, password: 'wrong-password-1' }) });
    out.push([res.status, ((await res.json()) as any).error?.code]);
  }
  return out;
}

describe.skipIf(!ready)('login lockout across nodes', () => {
  test('an existing account locks after 3 failures spread over 3 nodes', async () => {
    const u = await fundedUser(c, 0);
    const [row] = await c.sql`select username from users where id = ${u.userId}`;
    const t = await transcript(row!.username);
    expect(t.slice(0, 3).map((x) => x[0])).toEqual([401, 401, 401]);
    expect(t.slice(3)).toEqual(Array(3).fill([429, 'account_locked']));
  }, 30_000);

  test('an unknown username answers exactly like an existing one (locked after 3 failures over 3 nodes)', async () => {
    const unknown = await transcript(`ghost-${crypto.randomUUID().slice(0, 8)}`);
    expect(unknown).toEqual(await transcriptOfFreshAccount());
  }, 30_000);
});

/** The transcript of a real account that has never failed before. */
async function transcriptOfFreshAccount() {
  const u = await fundedUser(c, 0);
  const [row] = await c.sql`select username from users where id = ${u.userId}`;
  return transcript(row!.username);
}
