/**
 * Session affinity over real HTTP. Three equal-weight Anthropic doubles each keep their own prompt cache
 * (a conversation's first request there writes it, later ones read it), so the usage rows show whether a
 * conversation stayed on one channel: with affinity every request but the first reads the cache.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { startAnthropicUpstream, type UpstreamDouble, type UpstreamPlan } from '../doubles/anthropic-upstream';
import { addChannel, keyedUser, nodeOne, send, setPrice } from './relay-setup';

const CACHED = 1_000;
const N = 12;

interface Setup { gw: TestGateway; ups: UpstreamDouble[]; queues: UpstreamPlan[][]; ids: number[]; user: Awaited<ReturnType<typeof keyedUser>> }

async function setup(env: Record<string, string>): Promise<Setup> {
  const gw = await startGateway(env);
  const queues: UpstreamPlan[][] = [[], [], []];
  const ups = queues.map((q) => {
    const d = startAnthropicUpstream({ promptCache: CACHED, maxRecorded: 100 });
    d.script(() => q.shift() ?? { text: 'ok' });
    return d;
  });
  const ids: number[] = [];
  for (const [i, d] of ups.entries()) ids.push(await addChannel(gw, { type: 'anthropic', url: d.url, models: ['m'], name: `c${i}` }));
  await setPrice(gw, 'm', { cache_read: 100_000, cache_write: 1_250_000 });
  return { gw, ups, queues, ids, user: await keyedUser(gw, 1_000_000_000) };
}
const teardown = async (s: Setup) => { for (const d of s.ups) await d.stop(); await s.gw.stop(); };

const rowOf = (s: Setup, id: string) => s.gw.db.get('select * from usage_logs where request_id = ?', id);

/** One turn of conversation `conv`; returns the usage row. */
async function turn(s: Setup, conv: string, how: 'header' | 'metadata' = 'header', extra: Record<string, string> = {}) {
  const body = { model: 'm', max_tokens: 50, messages: [{ role: 'user', content: `conversation ${conv}` }], ...(how === 'metadata' ? { metadata: { user_id: conv } } : {}) };
  const headers = { 'vendor-version': '2023-06-01', ...(how === 'header' ? { 'x-claude-code-session-id': conv } : {}), ...extra };
  // Affinity is per node (README: Running a cluster): every turn goes to node 1.
  const r = await send(nodeOne(s.gw), s.user.key, body, headers);
  expect(r.status).toBe(200);
  return (await rowOf(s, r.headers.get('request-id')!));
}

describe('with affinity (default)', () => {
  let s: Setup;
  beforeAll(async () => { s = await setup({}); });
  afterAll(() => teardown(s));

  test(`${N} turns of one session over 3 equal channels: one cache write, then cache reads on every turn`, async () => {
    const rows: any[] = [];
    for (let i = 0; i < N; i++) rows.push(await turn(s, 'session-a'));
    expect(rows.map((r) => r.cache_write_tokens)).toEqual([CACHED, ...Array(N - 1).fill(0)]);
    expect(rows.map((r) => r.cache_read_tokens)).toEqual([0, ...Array(N - 1).fill(CACHED)]);
    expect(new Set(rows.map((r) => r.channel_id)).size).toBe(1);
  });

  test('metadata.user_id identifies the conversation when the header is absent', async () => {
    const rows: any[] = [];
    for (let i = 0; i < 6; i++) rows.push(await turn(s, 'user-b', 'metadata'));
    expect(rows.slice(1).every((r) => r.cache_read_tokens === CACHED && r.channel_id === rows[0].channel_id)).toBe(true);
  });

  test('a failure breaks the pin: failover serves it elsewhere, and the conversation stays there', async () => {
    const first = await turn(s, 'session-c');
    const pinned = s.ids.indexOf(first.channel_id);
    s.queues[pinned]!.push({ error: { status: 500, message: 'boom' } });
    const moved = await turn(s, 'session-c');
    expect(moved.channel_id).not.toBe(first.channel_id);
    expect(moved.attempts).toBe(2);
    expect(moved.cache_write_tokens).toBe(CACHED); // a new channel's cache
    for (let i = 0; i < 4; i++) {
      const r = await turn(s, 'session-c');
      expect(r.channel_id).toBe(moved.channel_id);
      expect(r.cache_read_tokens).toBe(CACHED);
    }
  });

  test('priority still wins: a higher-priority channel takes the conversation over (affinity is within the top tier)', async () => {
    const first = await turn(s, 'session-d');
    const top = startAnthropicUpstream({ promptCache: CACHED, maxRecorded: 10 });
    try {
      const topId = await addChannel(s.gw, { type: 'anthropic', url: top.url, models: ['m'], priority: 10, name: 'top' });
      const next = await turn(s, 'session-d');
      expect(next.channel_id).toBe(topId);
      expect(next.channel_id).not.toBe(first.channel_id);
      expect((await s.gw.api('DELETE', `/api/channel/${topId}`)).status).toBe(200);
    } finally {
      await top.stop();
    }
  });
});

test('without affinity (AFFINITY_TTL_SECONDS=0) the same session is spread and rewrites the cache', async () => {
  const s = await setup({ AFFINITY_TTL_SECONDS: '0' });
  try {
    const rows: any[] = [];
    for (let i = 0; i < N; i++) rows.push(await turn(s, 'session-a'));
    // With 3 equal channels, all 12 on one channel has probability 3^-11.
    expect(rows.filter((r) => r.cache_write_tokens > 0).length).toBeGreaterThan(1);
    expect(new Set(rows.map((r) => r.channel_id)).size).toBeGreaterThan(1);
  } finally {
    await teardown(s);
  }
});

test("one user's flood of sessions cannot evict another user's pin: its own oldest go (AFFINITY_MAX_PER_USER)", async () => {
  // 40 pins in all, 4 per user: before, one LRU for everyone, and a user's 60 cheap sessions pushed every other pin out.
  const s = await setup({ AFFINITY_MAX_ENTRIES: '40', AFFINITY_MAX_PER_USER: '4' });
  try {
    const victim = await turn(s, 'victim-session');
    const flooder = await keyedUser(s.gw, 1_000_000_000);
    for (let i = 0; i < 60; i++) {
      const r = await send(nodeOne(s.gw), flooder.key, { model: 'm', max_tokens: 5, messages: [{ role: 'user', content: `flood ${i}` }] }, { 'vendor-version': '2023-06-01', 'x-claude-code-session-id': `flood-${i}` });
      expect(r.status).toBe(200);
    }
    // The victim's conversation is still pinned: every later turn reads the cache on the channel that wrote it.
    const rows: any[] = [];
    for (let i = 0; i < 6; i++) rows.push(await turn(s, 'victim-session'));
    expect(rows.every((r) => r.channel_id === victim.channel_id && r.cache_read_tokens === CACHED)).toBe(true);
  } finally {
    await teardown(s);
  }
}, 60_000);
