/**
 * A realtime session's budget across nodes (PostgreSQL + Redis): a key's daily budget funds exactly 5 responses, 3
 * are spent through /v1/messages on node 1, and a session on node 0 then gets the 2 that are left. Every response
 * (and every request) costs exactly its worst case W (input prices 0, output 100 units per token, 10 tokens), so the
 * numbers do not depend on timing. The session's responses are started by the upstream itself (its turn detection):
 * such a response cannot be refused, only the session ended before it, so a session that runs on past the budget
 * spends past it. Also the balance: its rest held by requests in flight on node 1 ends the session after its response.
 * The SQLite twin (one node): the budget test of tests/e2e/realtime-key-policy.test.ts.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import Redis from 'ioredis';
import { RealtimeTestClient, startRealtimeUpstream } from '../doubles/realtime-upstream';
import { startCluster, within, type Cluster } from '../helpers/cluster';
import { requirePg } from '../helpers/postgres';
import { REDIS_TEST_URL, requireRedis } from '../helpers/redis';
import { clearOfUtcDayEnd } from '../helpers/window-edge';
import { upstream, type Scripted } from '../e2e/relay-setup';
import { addChannel, expectConsistent, fundedUser, msg, OUTPUT_PRICE, REQUEST_COST, send, setPrice } from './fixtures';

const ready = (await requirePg('tests/cluster/realtime-budget.test.ts')) && (await requireRedis('tests/cluster/realtime-budget.test.ts'));
const W = REQUEST_COST;
const MESSAGES_MODEL = 'msg-model';
const PRICE = { model: 'gpt-realtime', input: 0, output: OUTPUT_PRICE, cache_read: 0, cache_write: 0, audio_input: 0, audio_output: OUTPUT_PRICE, context_window: 16_000 };
/** What a response of 10 output tokens reports: it costs W, its worst case at max_output_tokens 10. */
const USAGE = { total_tokens: 10, input_tokens: 0, output_tokens: 10, input_token_details: { text_tokens: 0, audio_tokens: 0, cached_tokens: 0 }, output_token_details: { text_tokens: 10, audio_tokens: 0 } };
const rt = startRealtimeUpstream();
const clients: RealtimeTestClient[] = [];
let ant: Scripted;
let c: Cluster;

beforeAll(async () => {
  if (!ready) return;
  await clearOfUtcDayEnd();
  // A session is admitted when one response of 10 tokens (W) fits.
  c = await startCluster({ env: { REALTIME_DEFAULT_MODEL: 'gpt-realtime', REALTIME_RESERVE_TOKENS: '10' } });
  ant = upstream('anthropic', { usage: { input: 0, output: 10 } });
  await addChannel(c, ant.url, [MESSAGES_MODEL]);
  await setPrice(c, MESSAGES_MODEL);
  expect((await c.api(0, 'POST', '/api/channel/', { name: 'rt', type: 'openai', base_url: rt.url, key: 'up-key-1', models: ['gpt-realtime'] })).status).toBe(200);
  expect((await c.api(0, 'PUT', '/api/pricing/', PRICE)).status).toBe(200);
}, 60_000);
afterAll(async () => {
  for (const x of clients) if (x.ws.readyState <= 1) x.ws.close();
  await c?.stop();
  await ant?.stop();
  await rt.stop();
});

async function budgetedKey(limit: number) {
  const u = await fundedUser(c, 1_000_000);
  const b = await c.api(0, 'PUT', '/api/budget/', { scope: 'key', subject_id: u.keyId, period: 'daily', limit });
  expect(b.status).toBe(200);
  // Known on every node: node 1 refuses past it (checked below), node 0 admits the session against it.
  await within('the budget on node 1', 2_000, async () => (await c.api(1, 'GET', `/api/budget/?scope=key&subject_id=${u.keyId}`)).body.data?.length === 1);
  return { ...u, budgetId: b.body.data.id as number };
}

/** Has the upstream start response `n` of its own (server turn detection) and report it done with USAGE. */
function upstreamResponse(conn: number, n: number) {
  const base = { id: `resp_srv_${n}`, object: 'realtime.response', output: [], conversation_id: 'conv_1', output_modalities: ['text'], max_output_tokens: 10 };
  rt.send(JSON.stringify({ type: 'response.created', event_id: `ev_c${n}`, response: { ...base, status: 'in_progress', status_details: null, usage: null } }), conn);
  rt.send(JSON.stringify({ type: 'response.done', event_id: `ev_d${n}`, response: { ...base, status: 'completed', status_details: null, usage: USAGE } }), conn);
}

/** What Redis holds for requests in flight on every node: against a budget, or (no budget id) against the user's balance. */
async function heldInRedis(userId: number, budgetId?: number): Promise<number> {
  const r = new Redis(REDIS_TEST_URL, { maxRetriesPerRequest: 2 });
  try {
    return Number((await r.hget(`${c.prefix}{u:${userId}}:${budgetId === undefined ? 'acct' : `b:${budgetId}`}`, 'held')) ?? 0);
  } finally {
    r.disconnect();
  }
}

/** Has 4 slow requests of `key` run on node 1 (each W, held until they commit 2.5 s later); resolves once Redis holds them, with their answers to come. */
async function fourHeldOnNode1(key: string, held: () => Promise<number>): Promise<{ answers: Promise<Array<{ status: number }>> }> {
  ant.fallback = { usage: { input: 0, output: 10 }, delayMs: 2_500 };
  const slow = Promise.all(Array.from({ length: 4 }, () => send(c.nodes[1]!.url, key, msg(MESSAGES_MODEL))));
  try {
    await within('4 requests held', 3_000, async () => (await held()) === 4 * W);
  } finally {
    ant.fallback = { usage: { input: 0, output: 10 } };
  }
  return { answers: slow };
}

async function openSession(node: number, key: string): Promise<{ x: RealtimeTestClient; conn: number }> {
  const x = new RealtimeTestClient(`${c.nodes[node]!.url.replace('http://', 'ws://')}/v1/realtime?model=gpt-realtime`, { headers: { authorization: `Bearer ${key}` } });
  clients.push(x);
  await x.opened;
  await x.waitFor('session.created');
  return { x, conn: rt.connections.at(-1)!.id };
}

/**
 * Has the upstream run one response, then returns how the session closed within 2 s (null: it stayed open). A session
 * still open gets the upstream's next turn, which is not refusable, so what it is billed shows in the test's totals.
 */
async function oneResponseThenClosed(x: RealtimeTestClient, conn: number): Promise<{ code: number } | null> {
  upstreamResponse(conn, 1);
  await x.waitFor('response.done', 1);
  const closed = await x.waitClose(2_000).catch(() => null);
  if (!closed) {
    upstreamResponse(conn, 2);
    await x.waitClose(3_000).catch(() => null);
  }
  return closed;
}

const charged = async (userId: number) => Number((await c.sql`select coalesce(sum(cost), 0)::bigint as s from usage_logs where user_id = ${userId}`)[0]!.s);

describe.skipIf(!ready)('a realtime session against a budget or balance spent on another node', () => {
  test('3 of 5 responses spent via /v1/messages on node 1: the session on node 0 gets 2, then ends (1008 budget_exceeded); spend = limit', async () => {
    const u = await budgetedKey(5 * W);
    for (let i = 0; i < 3; i++) expect((await send(c.nodes[1]!.url, u.key, msg(MESSAGES_MODEL))).status).toBe(200);
    await within('3 requests charged', 3_000, async () => (await charged(u.userId)) === 3 * W);

    const { x, conn } = await openSession(0, u.key);
    for (const n of [1, 2]) {
      upstreamResponse(conn, n);
      await x.waitFor('response.done', n);
    }
    // The budget is now used up on every node's count but node 0's own (it saw 2 of the 5 charges).
    const closed = await x.waitClose(3_000).catch(() => null);
    if (!closed) {
      // Still open: the upstream's next turn is billed, past the budget.
      upstreamResponse(conn, 3);
      await x.waitClose(3_000).catch(() => null);
    }
    expect(closed?.code).toBe(1008);
    expect(x.events().find((e) => e.type === 'error')?.error).toMatchObject({ type: 'billing_error', code: 'budget_exceeded' });
    await within('the session recorded', 3_000, async () => (await c.sql`select 1 from realtime_sessions where user_id = ${u.userId}`).length === 1);
    expect(await charged(u.userId)).toBe(5 * W);
    expect(Number((await c.sql`select spent from budgets where id = ${u.budgetId}`)[0]!.spent)).toBe(5 * W);
    await expectConsistent(c, u.userId);
  }, 30_000);

  test('the rest of the budget held by requests in flight on node 1: the session on node 0 ends after its response, and its next one is not billed past the budget', async () => {
    const u = await budgetedKey(5 * W);
    const { x, conn } = await openSession(0, u.key);
    // 4 slow requests on node 1 hold 4 of the 5 responses' worth until they commit.
    const slow = await fourHeldOnNode1(u.key, () => heldInRedis(u.userId, u.budgetId));
    // Node 0 counted its own charge only; every node's count leaves the budget nothing (1 spent, 4 held).
    const closed = await oneResponseThenClosed(x, conn);
    expect((await slow.answers).map((r) => r.status)).toEqual([200, 200, 200, 200]);
    await within('the session recorded', 3_000, async () => (await c.sql`select 1 from realtime_sessions where user_id = ${u.userId}`).length === 1);
    await within('every charge committed', 3_000, async () => (await charged(u.userId)) >= 5 * W);
    await Bun.sleep(300);
    expect(await charged(u.userId)).toBe(5 * W);
    expect(Number((await c.sql`select spent from budgets where id = ${u.budgetId}`)[0]!.spent)).toBe(5 * W);
    expect(closed?.code).toBe(1008);
    expect(x.events().find((e) => e.type === 'error')?.error).toMatchObject({ type: 'billing_error', code: 'budget_exceeded' });
    await expectConsistent(c, u.userId);
  }, 30_000);

  test('the rest of the balance held by requests in flight on node 1: the session on node 0 ends after its response (1008 quota_exhausted), the upstream is not left to run its next turn for nothing', async () => {
    const u = await fundedUser(c, 5 * W);
    const { x, conn } = await openSession(0, u.key);
    const slow = await fourHeldOnNode1(u.key, () => heldInRedis(u.userId));
    // Node 0 counted its own charge only; every node's count leaves the user nothing (1 spent, 4 held).
    const closed = await oneResponseThenClosed(x, conn);
    expect((await slow.answers).map((r) => r.status)).toEqual([200, 200, 200, 200]);
    await within('the session recorded', 3_000, async () => (await c.sql`select 1 from realtime_sessions where user_id = ${u.userId}`).length === 1);
    expect((await c.sql`select cost from usage_logs where user_id = ${u.userId} and kind = 'realtime'`).map((r) => Number(r.cost))).toEqual([W]);
    expect(closed?.code).toBe(1008);
    expect(x.events().find((e) => e.type === 'error')?.error).toMatchObject({ type: 'billing_error', code: 'quota_exhausted' });
    expect(await charged(u.userId)).toBe(5 * W);
    await expectConsistent(c, u.userId);
  }, 30_000);
});
