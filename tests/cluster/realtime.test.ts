/**
 * REALTIME_MAX_SESSIONS_PER_KEY counts a key's sessions on every node together: with a limit of 2, a
 * session on A and one on B leave none for C; closing A's frees one for C within 1 s; a kill -9'd
 * node's sessions stop counting once their lease lapses (LIMIT_LEASE_MS). Which Redis keys the slots
 * use is checked in redis-slots.test.ts; this file checks the behaviour through real sockets.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { RealtimeTestClient, startRealtimeUpstream } from '../doubles/realtime-upstream';
import { startCluster, within, type Cluster } from '../helpers/cluster';
import { requirePg } from '../helpers/postgres';
import { requireRedis } from '../helpers/redis';
import { fundedUser } from './fixtures';

const ready = (await requirePg('tests/cluster/realtime.test.ts')) && (await requireRedis('tests/cluster/realtime.test.ts'));
const LEASE_MS = 3_000;
const PRICE = { model: 'gpt-realtime', input: 4_000_000, output: 16_000_000, cache_read: 0, cache_write: 0, audio_input: 32_000_000, audio_output: 64_000_000, context_window: 16_000 };
const UPGRADE = { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' };
const up = startRealtimeUpstream();
const clients: RealtimeTestClient[] = [];
let c: Cluster;

beforeAll(async () => {
  if (!ready) return;
  c = await startCluster({ env: { REALTIME_MAX_SESSIONS_PER_KEY: '2', REALTIME_DEFAULT_MODEL: 'gpt-realtime', LIMIT_LEASE_MS: String(LEASE_MS) } });
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

/** A session if the handshake succeeds, else null (refused before the upgrade). */
async function trySession(node: number, key: string): Promise<RealtimeTestClient | null> {
  try {
    return await session(node, key);
  } catch {
    return null;
  }
}

/**
 * The answer to an upgrade request on `node`; only for expected refusals (a 101 would open a session). */
async function tryOpen(node: number, key: string): Promise<{ status: number; code?: string }> {
  const res = await fetch(`${c.nodes[node]!.url}/v1/realtime`, { headers: { ...UPGRADE, authorization: `Bearer ${key}` }, signal: AbortSignal.timeout(3000) });
  const body: any = res.status === 101 ? null : await res.json().catch(() => null);
  return { status: res.status, code: body?.error?.code };
}

describe.skipIf(!ready)('realtime sessions per key across nodes', () => {
  test('a session on A and one on B leave none for C; closing A frees one for C within 1 s; a killed node\'s slot returns within its lease', async () => {
    const u = await fundedUser(c, 50_000_000);
    const a = await session(0, u.key);
    const b = await session(1, u.key);
    expect(await tryOpen(2, u.key)).toEqual({ status: 429, code: 'too_many_sessions' });

    a.ws.close();
    await a.waitClose();
    const freed = await within("A's slot free on C", 1_000, async () => (await trySession(2, u.key)) !== null);
    console.log(`closed on A, free on C after ${Math.round(freed)} ms`);
    expect(await tryOpen(0, u.key)).toEqual({ status: 429, code: 'too_many_sessions' });

    // B dies with its session open: its slot counts until its lease lapses, then frees by itself.
    await c.nodes[1]!.kill9();
    await b.waitClose();
    expect(await tryOpen(0, u.key)).toEqual({ status: 429, code: 'too_many_sessions' });
    const back = await within("the dead node's slot back", LEASE_MS + 3_000, async () => (await trySession(0, u.key)) !== null);
    console.log(`killed node's slot back after ${Math.round(back)} ms (lease ${LEASE_MS} ms)`);
    expect(await tryOpen(2, u.key)).toEqual({ status: 429, code: 'too_many_sessions' });
  }, 60_000);
});
