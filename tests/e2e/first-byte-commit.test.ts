/**
 * PostgreSQL mode: a JSON answer's first bytes go out before its settlement's batch is built and sent. The
 * batch's work on the gateway's thread (building the SQL, writing it to the pool) ran before the server wrote
 * the answer, so it was in every client's time to first byte. Here that work is made to take BUSY_MS, and a
 * client in another process (this one is the gateway, blocked meanwhile) reads the answer: its first bytes
 * arrive before the busy work ends, its last byte only after the commit.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { ON_PG, startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, setPrice, upstream, V, type Scripted } from './relay-setup';

const BUSY_MS = 1500;
let gw: TestGateway;
let ant: Scripted;

/** Time to the first body chunk and to the end, read by a separate process. */
async function readElsewhere(url: string, key: string, body: string): Promise<{ status: number; first: number; total: number; text: string }> {
  const client = `
    const t0 = performance.now();
    const res = await fetch(process.env.URL, { method: 'POST', headers: JSON.parse(process.env.HEADERS), body: process.env.BODY });
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let first = -1, text = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (first < 0 && (done || value?.length)) first = performance.now() - t0;
      if (done) break;
      text += dec.decode(value, { stream: true });
    }
    console.log(JSON.stringify({ status: res.status, first, total: performance.now() - t0, text }));`;
  const p = Bun.spawn([process.execPath, '-e', client], {
    env: { ...process.env, URL: url, HEADERS: JSON.stringify({ 'content-type': 'application/json', 'x-api-key': key, ...V }), BODY: body },
    stdout: 'pipe', stderr: 'inherit',
  });
  const out = await new Response(p.stdout).text();
  await p.exited;
  return JSON.parse(out);
}

// PostgreSQL mode only: on SQLite the settlement is journaled before the answer and nothing commits after it.
describe.skipIf(!ON_PG)('a JSON answer and its settlement batch', () => {
  beforeAll(async () => {
    gw = await startGateway();
    ant = upstream('anthropic', { usage: { input: 10, output: 20 } });
    await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['fb'] });
    await setPrice(gw, 'fb', { input: 1_000_000, output: 1_000_000 });
  });
  afterAll(async () => { await ant?.stop(); await gw?.stop(); });

  test('the first bytes leave before the batch is built; the last byte after its commit', async () => {
    const u = await keyedUser(gw, 10_000);
    // Node 1's committer (in this process; behind a cluster proxy the request goes to node 1 itself).
    const committer = gw.services.backend.relay.durable as unknown as { commitBatch: (items: unknown[]) => Promise<void> };
    const own = committer.commitBatch.bind(committer);
    let batches = 0;
    committer.commitBatch = (items) => {
      batches++;
      const end = performance.now() + BUSY_MS;
      while (performance.now() < end) { /* the batch's work on this thread, made long */ }
      return own(items);
    };
    try {
      const r = await readElsewhere(`${gw.nodeUrl}/v1/messages`, u.key, JSON.stringify(msg('fb', { max_tokens: 100 })));
      expect(r.status).toBe(200);
      expect(batches).toBe(1);
      expect(r.first).toBeLessThan(BUSY_MS * 0.6);
      expect(r.total).toBeGreaterThanOrEqual(BUSY_MS);
      expect(JSON.parse(r.text).usage).toMatchObject({ input_tokens: 10, output_tokens: 20 });
    } finally {
      committer.commitBatch = own;
    }
    const rows = await gw.db.all('select cost from usage_logs where user_id = ?', u.id);
    expect(rows.length).toBe(1);
  }, 20_000);
});
