/**
 * A node whose PostgreSQL is unreachable (its connections cut and new ones refused, through a proxy; the real
 * server is never touched) answers the management routes with 503 `storage_unavailable` and `retry-after` (or, for a
 * connection lost mid-statement, `storage_outcome_unknown` without it), never a 500 `internal_error` (which says "a bug in the gateway" and has clients and operators chase
 * one). What the node can answer from memory it still answers; once the database is back every route works again.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startCluster, type Cluster } from '../helpers/cluster';
import { pgThroughProxy, requirePg } from '../helpers/postgres';
import { requireRedis } from '../helpers/redis';
import type { TcpProxy } from '../helpers/tcp-proxy';
import { callJson, loginToken } from '../helpers/gateway-process';

const ready = (await requirePg('tests/cluster/database-down-answers.test.ts')) && (await requireRedis('tests/cluster/database-down-answers.test.ts'));
let c: Cluster;
let proxy: TcpProxy;

beforeAll(async () => {
  if (!ready) return;
  const through = pgThroughProxy();
  proxy = through.proxy;
  c = await startCluster({ nodes: 1, nodeEnv: () => ({ DATABASE_URL: through.url, PG_SETTLE_DEADLINE_MS: '1000' }) });
}, 60_000);
afterAll(async () => {
  await c?.stop();
  proxy?.stop();
});

test.skipIf(!ready)('with the database cut, management routes answer 503 storage_unavailable (or from memory), never 500; all work again after', async () => {
  const url = c.nodes[0]!.url;
  const user = await c.api(0, 'POST', '/api/user/', { username: 'dbdown', password: 'dbdown-pw-123', quota: 1000 });
  expect(user.status).toBe(200);
  const userToken = await loginToken(url, 'dbdown', 'dbdown-pw-123');
  const key = await c.api(0, 'POST', '/api/token/', { name: 'k1' }, userToken);
  expect(key.status).toBe(200);
  const calls: Array<[string, string, unknown?, string?]> = [
    ['POST', '/api/user/login', { username: 'dbdown', password: 'dbdown-pw-123' }],
    ['POST', '/api/user/login', { username: 'dbdown', password: 'wrong-password' }],
    ['GET', '/api/user/self', undefined, userToken],
    ['PUT', '/api/user/self', { display_name: 'x' }, userToken],
    ['POST', '/api/token/', { name: 'k2' }, userToken],
    ['GET', '/api/token/', undefined, userToken],
    ['PUT', '/api/token/', { id: key.body.data.id, name: 'renamed' }, userToken],
    ['DELETE', `/api/token/${key.body.data.id}`, undefined, userToken],
    ['POST', '/api/user/', { username: 'dbdown2', password: 'dbdown-pw-123' }, c.rootToken],
    ['GET', '/api/user/', undefined, c.rootToken],
    ['POST', '/api/channel/', { name: 'c', type: 'anthropic', base_url: 'http://127.0.0.1:9', key: 'k', models: ['m'] }, c.rootToken],
    ['GET', '/api/channel/', undefined, c.rootToken],
    ['GET', '/api/log/self', undefined, userToken],
    ['GET', '/api/user/session', undefined, userToken],
    ['POST', '/api/user/2fa/setup', {}, userToken],
    ['POST', '/api/topup/', { amount: 5 }, userToken],
    ['POST', '/api/user/reset/request', { email: 'nobody@example.com' }],
    ['POST', '/api/user/logout', {}, userToken],
  ];
  proxy.down();
  try {
    const answers: Array<{ call: string; status: number; code: string | null; retryAfter: string | null; ms: number }> = [];
    for (const [method, path, body, token] of calls) {
      const t0 = performance.now();
      const r = await callJson(url, method, path, body, token);
      answers.push({ call: `${method} ${path}`, status: r.status, code: r.body?.error?.code ?? null, retryAfter: r.headers.get('retry-after'), ms: Math.round(performance.now() - t0) });
    }
    console.log(JSON.stringify(answers));
    // No 500: every failure is the database's, said as such (retryable when no statement ran; else the outcome is
    // unknown and no retry-after invites a blind retry).
    const said = (a: typeof answers[number]) => a.status === 503
      && ((a.code === 'storage_unavailable' && a.retryAfter === '1') || (a.code === 'storage_outcome_unknown' && a.retryAfter === null));
    expect(answers.filter((a) => a.status >= 500 && !said(a))).toEqual([]);
    // At least the writes failed for real (the test cannot pass by not cutting anything).
    expect(answers.filter((a) => a.code === 'storage_unavailable').length).toBeGreaterThanOrEqual(5);
  } finally {
    proxy.up();
  }
  // Back: the same node serves the account routes again.
  let ok = false;
  for (let i = 0; i < 100 && !ok; i++) {
    ok = (await callJson(url, 'POST', '/api/token/', { name: 'after' }, userToken)).status === 200;
    if (!ok) await Bun.sleep(100);
  }
  expect(ok).toBe(true);
}, 60_000);
