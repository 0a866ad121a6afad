/**
 * A graceful stop (SIGTERM) lets the requests in flight finish, and while one still runs it keeps its
 * concurrency slot: its upstream connection is still open, so a user limited to one request in flight gets
 * no second one on another node until the drained stream has ended and settled. Real processes on one
 * PostgreSQL schema and one Redis prefix.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startCluster, within, type Cluster } from '../helpers/cluster';
import { requirePg } from '../helpers/postgres';
import { requireRedis } from '../helpers/redis';
import { startAnthropicUpstream, type UpstreamDouble } from '../doubles/anthropic-upstream';
import { addChannel, fundedUser, HEADERS, msg, send, setPrice } from './fixtures';

const available = (await requirePg('tests/cluster/drain-slots.test.ts')) && (await requireRedis('tests/cluster/drain-slots.test.ts'));
const MODEL = 'drain-m';
let c: Cluster;
let up: UpstreamDouble;

beforeAll(async () => {
  if (!available) return;
  up = startAnthropicUpstream();
  // About 3 s of stream: 30 words, 100 ms apart.
  up.script(() => ({ text: Array.from({ length: 30 }, (_, i) => `w${i}`).join(' '), chunkDelayMs: 100 }));
  c = await startCluster({ nodes: 2 });
  await addChannel(c, up.url, [MODEL]);
  await setPrice(c, MODEL);
}, 60_000);
afterAll(async () => {
  await c?.stop();
  await up?.stop();
});

describe.skipIf(!available)('graceful drain', () => {
  test('a stream drained at shutdown keeps its user\'s concurrency slot until it ends, then gives it back', async () => {
    const u = await fundedUser(c, 10_000_000);
    expect((await c.api(0, 'PUT', '/api/user/', { id: u.userId, max_concurrency: 1 })).status).toBe(200);
    const refusal = async () => { const r = await send(c.nodes[1]!.url, u.key, msg(MODEL)); return [r.status, r.status === 429 ? JSON.parse(r.text).error.code : r.text.slice(0, 80)]; };
    const res = await fetch(`${c.nodes[0]!.url}/v1/messages`, { method: 'POST', headers: { ...HEADERS, 'x-api-key': u.key }, body: JSON.stringify(msg(MODEL, { max_tokens: 200, stream: true })) });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let text = '';
    while (!text.includes('content_block_delta')) text += dec.decode((await reader.read()).value);
    // The limit reached node 1 (change feed): its refusal is the baseline.
    await within('node 1 refuses a second request', 5_000, async () => (await refusal())[1] === 'user_concurrency_exceeded');

    const node0 = c.nodes[0]!;
    node0.terminate();
    // Node 0 stops listening but drains its stream; meanwhile the slot is still taken, wherever the user asks.
    await within('node 0 stopped accepting', 5_000, async () => fetch(`${node0.url}/v1/models`).then(() => false, () => true));
    expect(node0.proc.exitCode).toBeNull();
    expect(await refusal()).toEqual([429, 'user_concurrency_exceeded']);

    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += dec.decode(value);
    }
    expect(text).toContain('message_stop');
    expect(await node0.proc.exited).toBe(0);
    // Settled and released: the user's next request runs.
    const after = await send(c.nodes[1]!.url, u.key, msg(MODEL));
    expect(after.status).toBe(200);
  }, 60_000);
});
