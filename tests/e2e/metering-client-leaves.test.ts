/**
 * A client that leaves a translated (OpenAI-compatible) stream after the answer finished but before the upstream's
 * usage chunk (OpenAI sends finish_reason, then with include_usage a last chunk with `choices: []` and the usage)
 * is billed on that usage, not on the gateway's input estimate; a client leaving mid-generation still closes the
 * upstream at once. Over real HTTP: a raw fetch reader against the OpenAI double.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { CLUSTER_NODES, startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, upstream, type Scripted, keyedUser, msg, setPrice, V } from './relay-setup';

let gw: TestGateway;
let oai: Scripted;
const PRICE = { input: 3_000_000, output: 15_000_000 };
const USAGE = { input: 1000, output: 200 };
// 1000*3 + 200*15 units: what the upstream reported.
const COST = 6000;

beforeAll(async () => {
  gw = await startGateway();
  oai = upstream('openai', { usage: USAGE });
  await addChannel(gw, { type: 'openai', url: oai.url, models: ['leave-o'] });
  await setPrice(gw, 'leave-o', PRICE);
});
afterAll(async () => { await oai.stop(); await gw.stop(); });

const logOf = (requestId: string) => gw.db.get('select * from usage_logs where request_id = ?', requestId);
const charge = (requestId: string) => gw.db.all("select amount from ledger where kind = 'charge' and ref = ?", requestId);

/** Streams a request and aborts the connection once `until` is in what the client read; returns the request id. */
async function leaveAfter(key: string, until: string): Promise<string> {
  const ctrl = new AbortController();
  const res = await fetch(`${gw.url}/v1/messages`, { method: 'POST', signal: ctrl.signal, headers: { 'content-type': 'application/json', ...V, 'x-api-key': key },
    body: JSON.stringify(msg('leave-o', { stream: true, max_tokens: 300 })) });
  expect(res.status).toBe(200);
  const id = res.headers.get('request-id')!;
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let seen = '';
  while (!seen.includes(until)) {
    const r = await reader.read();
    if (r.done) throw new Error(`stream ended before ${until}: ${seen}`);
    seen += dec.decode(r.value);
  }
  expect(seen).not.toContain('message_delta');
  ctrl.abort();
  return id;
}

async function rowOf(id: string, withinMs: number) {
  const t0 = Date.now();
  while (!(await logOf(id)) && Date.now() - t0 < withinMs) await Bun.sleep(20);
  return logOf(id);
}

describe('client leaving a translated stream', () => {
  test('after finish_reason, before the usage chunk: billed on the reported usage, once', async () => {
    const u = await keyedUser(gw, 1_000_000);
    // role, "hello ", "world", finish: sent at once; then 800 ms of silence; then the usage chunk and [DONE].
    oai.queue.push({ text: 'hello world', usage: USAGE, pause: { afterFrames: 4, ms: 800 } });
    const id = await leaveAfter(u.key, 'content_block_stop');
    const row = await rowOf(id, 5000);
    expect(row).toMatchObject({ error_code: 'client_closed', status: 200, input_tokens: 1000, output_tokens: 200, cost: COST });
    expect(await charge(id)).toEqual([{ amount: -COST }]);
    await Bun.sleep(300); // nothing settles it a second time
    expect(await charge(id)).toEqual([{ amount: -COST }]);
    expect(await gw.services.ledger.sum(u.id)).toBe(1_000_000 - COST);
  }, 20_000);

  test('a usage chunk that does not come within the bound: the upstream is closed, billed as before', async () => {
    const u = await keyedUser(gw, 1_000_000);
    oai.queue.push({ text: 'hello world', usage: USAGE, pause: { afterFrames: 4, ms: 8000 } });
    const cancelledBefore = oai.double.cancelled;
    const id = await leaveAfter(u.key, 'content_block_stop');
    const t0 = Date.now();
    // The drain holds the request's upstream slot (one gateway: node 1's count is the one that serves it).
    if (CLUSTER_NODES === 1) expect(gw.services.relay.slots.inUse).toBe(1);
    const row = await rowOf(id, 6000);
    const waited = Date.now() - t0;
    // Held for the drain's bound (3 s), not for the upstream's 8 s.
    expect(waited).toBeGreaterThan(2500);
    expect(waited).toBeLessThan(4500);
    while (oai.double.cancelled === cancelledBefore && Date.now() - t0 < 6000) await Bun.sleep(20);
    expect(oai.double.cancelled).toBe(cancelledBefore + 1);
    if (CLUSTER_NODES === 1) expect(gw.services.relay.slots.inUse).toBe(0); // given back with the settlement
    // As a stream the client left today: the stream's status, client_closed, the input estimate (no usage came).
    expect(row).toMatchObject({ error_code: 'client_closed', status: 200 });
    expect(row.input_tokens).toBeLessThan(1000);
    expect(await charge(id)).toEqual(row.cost > 0 ? [{ amount: -row.cost }] : []);
  }, 20_000);

  test('mid-generation: the upstream is closed at once, billed on what was delivered', async () => {
    const u = await keyedUser(gw, 1_000_000);
    oai.queue.push({ text: 'one two three four five six seven eight', usage: USAGE, chunkDelayMs: 300 });
    const cancelledBefore = oai.double.cancelled;
    const id = await leaveAfter(u.key, 'text_delta');
    const t0 = Date.now();
    while (oai.double.cancelled === cancelledBefore && Date.now() - t0 < 3000) await Bun.sleep(10);
    expect(oai.double.cancelled).toBe(cancelledBefore + 1);
    expect(Date.now() - t0).toBeLessThan(1000);
    const row = await rowOf(id, 3000);
    expect(row.error_code).toBe('client_closed');
    expect(row.input_tokens).toBeLessThan(1000);
    expect(row.output_tokens).toBeLessThan(200);
    expect(await charge(id)).toEqual(row.cost > 0 ? [{ amount: -row.cost }] : []);
  }, 20_000);
});
