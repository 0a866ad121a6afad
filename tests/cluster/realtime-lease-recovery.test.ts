/**
 * REALTIME_MAX_SESSIONS_PER_KEY after Redis lost its data: the sessions still open hold leases that renew
 * themselves only every LIMIT_LEASE_MS/3 (40 s by default). They must be back when admissions reopen (after
 * HOLD_LEASE_MS/3 + 1 s), or a key limited to 2 sessions opens 2 more on any node meanwhile.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { RealtimeTestClient, startRealtimeUpstream } from '../doubles/realtime-upstream';
import { startCluster, within, type Cluster } from '../helpers/cluster';
import { requirePg } from '../helpers/postgres';
import { redisClient, requireRedis } from '../helpers/redis';
import { fundedUser } from './fixtures';

const ready = (await requirePg('tests/cluster/realtime-lease-recovery.test.ts')) && (await requireRedis('tests/cluster/realtime-lease-recovery.test.ts'));
const HOLD_LEASE_MS = 3_000;
const PRICE = { model: 'gpt-realtime', input: 4_000_000, output: 16_000_000, cache_read: 0, cache_write: 0, audio_input: 32_000_000, audio_output: 64_000_000, context_window: 16_000 };
const UPGRADE = { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' };
const up = startRealtimeUpstream();
const clients: RealtimeTestClient[] = [];
let c: Cluster;

beforeAll(async () => {
  if (!ready) return;
  // LIMIT_LEASE_MS left at its default (120 s).
  c = await startCluster({ env: { REALTIME_MAX_SESSIONS_PER_KEY: '2', REALTIME_DEFAULT_MODEL: 'gpt-realtime', HOLD_LEASE_MS: String(HOLD_LEASE_MS) } });
  const ch = await c.api(0, 'POST', '/api/channel/', { name: 'rt', type: 'openai', base_url: up.url, key: 'upstream-secret', models: ['gpt-realtime'], timeout_ms: 5000 });
  expect(ch.status).toBe(200);
  expect((await c.api(0, 'PUT', '/api/pricing/', PRICE)).status).toBe(200);
}, 60_000);
afterAll(async () => {
  for (const x of clients) x.ws.close();
  await c?.stop();
  await up.stop();
});

async function session(node: number, key: string): Promise<RealtimeTestClient> {
  const x = new RealtimeTestClient(`${c.nodes[node]!.url.replace('http://', 'ws://')}/v1/realtime`, { headers: { authorization: `Bearer ${key}` } });
  clients.push(x);
  await x.opened;
  await x.waitFor('session.created');
  return x;
}

/** The answer to an upgrade request on `node`, closed at once if it opened a session. */
async function tryOpen(node: number, key: string): Promise<{ status: number; code?: string }> {
  const res = await fetch(`${c.nodes[node]!.url}/v1/realtime`, { headers: { ...UPGRADE, authorization: `Bearer ${key}` }, signal: AbortSignal.timeout(3000) });
  const body: any = res.status === 101 ? null : await res.json().catch(() => null);
  if (res.status === 101) await res.body?.cancel().catch(() => {});
  return { status: res.status, code: body?.error?.code };
}

describe.skipIf(!ready)('realtime sessions per key after a Redis data loss', () => {
  test('two sessions open on A and B when the prefix is emptied: past the recovery window, C still refuses a third', async () => {
    const u = await fundedUser(c, 50_000_000);
    await session(0, u.key);
    await session(1, u.key);
    expect(await tryOpen(2, u.key)).toEqual({ status: 429, code: 'too_many_sessions' });

    const redis = redisClient();
    try {
      await redis.del(...(await redis.keys(`${c.prefix}*`)));
    } finally {
      redis.disconnect();
    }
    // Admissions answer 503 until the holds are back (HOLD_LEASE_MS/3 + 1 s); then the sessions must count again.
    await within('admissions open again', 10_000, async () => (await tryOpen(2, u.key)).status !== 503);
    expect(await tryOpen(2, u.key)).toEqual({ status: 429, code: 'too_many_sessions' });
    expect(await tryOpen(0, u.key)).toEqual({ status: 429, code: 'too_many_sessions' });
  }, 60_000);
});
