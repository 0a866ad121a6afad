/**
 * A price changed or deleted while a request is in flight: the request is billed at the price it was admitted
 * (and held) at, whatever an administrator does meanwhile. Before, it was billed at the price found when it
 * settled: a price deleted mid-request made the whole request free, a raised one billed it above its hold.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, balanceOf, keyedUser, send, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
let ant: Scripted;
let channelId: number;
const PRICE = { input: 1_000_000, output: 2_000_000, cache_read: 0, cache_write: 0 };
const BALANCE = 10_000_000;

beforeAll(async () => {
  gw = await startGateway();
  ant = upstream('anthropic');
  channelId = await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['pc-stream', 'pc-json', 'pc-raise', 'pc-alias'], mapping: { 'pc-alias': 'pc-target' } });
}, 30_000);
afterAll(async () => { await ant.stop(); await gw.stop(); });

const START = '{"type":"message_start","message":{"id":"msg_p","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":900,"output_tokens":1}}}';
const HEAD = `event: message_start\ndata: ${START}\n\n`
  + 'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
  + 'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hello"}}\n\n';
const TAIL = 'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
  + 'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":500}}\n\n'
  + 'event: message_stop\ndata: {"type":"message_stop"}\n\n';
const ANSWER = { id: 'msg_p', type: 'message', role: 'assistant', model: 'm', content: [{ type: 'text', text: 'hello' }], stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 900, output_tokens: 500 } };
// 900 input × 1 + 500 output × 2 units per token at the admitted price.
const COST = 1900;

/** Scripts one answer that reaches the upstream, waits until `change` ran, then finishes; returns the settled request. */
async function during(model: string, stream: boolean, change: () => Promise<void>, extra: Record<string, unknown> = {}) {
  let arrived!: () => void;
  const reached = new Promise<void>((r) => (arrived = r));
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const enc = new TextEncoder();
  ant.queue.push({
    response: async () => {
      arrived();
      if (!stream) {
        await gate;
        return Response.json(ANSWER);
      }
      return new Response(new ReadableStream<Uint8Array>({
        async start(c) {
          c.enqueue(enc.encode(HEAD));
          await gate;
          c.enqueue(enc.encode(TAIL));
          c.close();
        },
      }), { headers: { 'content-type': 'text/event-stream' } });
    },
  });
  const u = await keyedUser(gw, BALANCE);
  const sent = send(gw, u.key, { model, max_tokens: 1000, stream, messages: [{ role: 'user', content: 'Say hello' }], ...extra });
  await reached;
  await change();
  release();
  const r = await sent;
  expect(r.status).toBe(200);
  const id = r.headers.get('request-id')!;
  gw.services.relay.quota.flush();
  const row = await gw.db.get('select cost, input_tokens, output_tokens, billed_model from usage_logs where request_id = ?', id) as Record<string, unknown>;
  const charges = await gw.db.all("select amount from ledger where kind = 'charge' and ref = ?", id);
  return { row, charges, balance: await balanceOf(gw, u.id), sum: await gw.services.ledger.sum(u.id) };
}

const setPrice = async (model: string, p: Record<string, number>) => expect((await gw.api('PUT', '/api/pricing/', { model, ...p })).status).toBe(200);

describe('a price changed mid-request', () => {
  for (const stream of [true, false]) {
    const model = stream ? 'pc-stream' : 'pc-json';
    test(`${stream ? 'stream' : 'json'}: the price deleted meanwhile still bills the admitted price, never 0`, async () => {
      await setPrice(model, PRICE);
      const out = await during(model, stream, async () => { expect((await gw.api('DELETE', `/api/pricing/${model}`)).status).toBe(200); });
      expect(out.row).toMatchObject({ cost: COST, input_tokens: 900, output_tokens: 500 });
      expect(out.charges).toEqual([{ amount: -COST }]);
      expect(out.balance).toBe(BALANCE - COST);
      expect(out.sum).toBe(BALANCE - COST);
    }, 20_000);
  }

  test('a price raised meanwhile bills the admitted price (the hold was sized on it)', async () => {
    await setPrice('pc-raise', PRICE);
    const out = await during('pc-raise', true, () => setPrice('pc-raise', { input: 100_000_000, output: 200_000_000 }));
    expect(out.row.cost).toBe(COST);
    expect(out.charges).toEqual([{ amount: -COST }]);
    expect(out.balance).toBe(BALANCE - COST);
  }, 20_000);

  test('billing the upstream model: its price deleted meanwhile still bills it, not the cheaper requested one', async () => {
    expect((await gw.api('PUT', '/api/channel/', { id: channelId, billing_model: 'upstream' })).status).toBe(200);
    await setPrice('pc-alias', { input: 1, output: 1 });
    await setPrice('pc-target', PRICE);
    const out = await during('pc-alias', true, async () => { expect((await gw.api('DELETE', '/api/pricing/pc-target')).status).toBe(200); });
    expect(out.row).toMatchObject({ cost: COST, billed_model: 'pc-target' });
    expect(out.charges).toEqual([{ amount: -COST }]);
  }, 20_000);
});
