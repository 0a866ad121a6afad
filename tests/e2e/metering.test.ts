import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, eventNames, upstream, type Scripted, keyedUser, msg, send, setPrice, availableOf } from './relay-setup';

let gw: TestGateway;
let ant: Scripted;
let oai: Scripted;
const PRICE = { input: 3_000_000, output: 15_000_000, cache_read: 300_000, cache_write: 3_750_000 };
const USAGE = { input: 1000, output: 200, cacheRead: 5000, cacheWrite: 100 };
// 1000*3 + 200*15 + 5000*0.3 + 100*3.75 = 7875 units exactly.
const COST = 7875;

beforeAll(async () => {
  gw = await startGateway();
  ant = upstream('anthropic', { usage: USAGE });
  oai = upstream('openai', { usage: USAGE });
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['meter-a', 'cheap'] });
  await addChannel(gw, { type: 'openai', url: oai.url, models: ['meter-o'] });
  await setPrice(gw, 'meter-a', PRICE);
  await setPrice(gw, 'meter-o', PRICE);
  // Only output is priced: the worst case of a request is exactly max_tokens units.
  await setPrice(gw, 'cheap', { input: 0, output: 1_000_000 });
});
afterAll(async () => { await ant.stop(); await oai.stop(); await gw.stop(); });

// Settlements are batched: write what is queued before reading the tables directly.
const logOf = (requestId: string) => gw.db.get('select * from usage_logs where request_id = ?', requestId);
const balance = async (id: number) => { gw.services.relay.quota.flush(); return (await gw.services.users.byId(id))!.quota; };
const charge = (requestId: string) => gw.db.all("select amount from ledger where kind = 'charge' and ref = ?", requestId);

describe('metering exactness', () => {
  for (const [model, stream] of [['meter-a', false], ['meter-a', true], ['meter-o', false], ['meter-o', true]] as const) {
    test(`${model} ${stream ? 'stream' : 'json'}: tokens × prices = ledger charge = usage log cost = balance drop`, async () => {
      const u = await keyedUser(gw, 1_000_000, { unlimited_quota: false, remain_quota: 500_000 });
      const r = await send(gw, u.key, msg(model, { stream, max_tokens: 300 }));
      expect(r.status).toBe(200);
      if (stream) expect(eventNames(r.text).at(-1)).toBe('message_stop');
      const id = r.headers.get('request-id')!;
      // Through the OpenAI translation too: cached_tokens → cache reads, cache_write_tokens → cache writes.
      const cost = COST;
      const log = await logOf(id);
      expect(log).toMatchObject({ cost, status: 200, error_code: '', input_tokens: 1000, output_tokens: 200, cache_read_tokens: 5000, cache_write_tokens: 100, user_id: u.id, api_key_id: u.keyId, attempts: 1 });
      expect(await charge(id)).toEqual([{ amount: -cost }]);
      expect(await balance(u.id)).toBe(1_000_000 - cost);
      expect(await gw.services.ledger.sum(u.id)).toBe(1_000_000 - cost);
      const key = await gw.db.get('select used_quota, remain_quota from api_keys where id = ?', u.keyId);
      expect(key).toEqual({ used_quota: cost, remain_quota: 500_000 - cost });
      const keyView = await gw.api('GET', `/api/token/${u.keyId}`, undefined, u.token);
      expect(Math.abs(keyView.body.data.last_used_at - Date.now() / 1000)).toBeLessThan(5);
      expect(await availableOf(gw, u.id)).toBe(1_000_000 - cost);
      const self = await gw.api('GET', '/api/log/self', undefined, u.token);
      expect(self.body.data.items[0]).toMatchObject({ request_id: id, cost, model, channel_id: null });
      expect(self.body.data.items[0].latency_ms).toBeGreaterThanOrEqual(0);
    });
  }
});

describe('quota', () => {
  test('402 when the worst case exceeds the balance; nothing reaches the upstream', async () => {
    const u = await keyedUser(gw, 999);
    const before = ant.hits;
    const r = await send(gw, u.key, msg('cheap', { max_tokens: 1000 }));
    expect(r.status).toBe(402);
    expect(r.body.error).toMatchObject({ type: 'billing_error', code: 'quota_exhausted' });
    expect(ant.hits).toBe(before);
    expect((await send(gw, u.key, msg('cheap', { max_tokens: 900 }))).status).toBe(200);
  });

  test('a limited key cannot spend past its remain_quota', async () => {
    const u = await keyedUser(gw, 1_000_000, { unlimited_quota: false, remain_quota: 500 });
    const r = await send(gw, u.key, msg('cheap', { max_tokens: 1000 }));
    expect(r.status).toBe(402);
    expect(r.body.error.code).toBe('key_quota_exhausted');
  });

  test('concurrent requests cannot overspend: reservations hold the worst case', async () => {
    const u = await keyedUser(gw, 3500);
    ant.queue.push(...Array.from({ length: 8 }, () => ({ delayMs: 150, usage: { input: 1, output: 5 } })));
    const rs = await Promise.all(Array.from({ length: 8 }, () => send(gw, u.key, msg('cheap', { max_tokens: 1000 }))));
    ant.queue.length = 0;
    const codes = rs.map((r) => r.status).sort();
    expect(codes).toEqual([200, 200, 200, 402, 402, 402, 402, 402]);
    expect(await balance(u.id)).toBe(3500 - 3 * 5);
    expect(await availableOf(gw, u.id)).toBe(3500 - 15);
  });

  test('an upstream failure costs nothing but is logged', async () => {
    const u = await keyedUser(gw, 100_000);
    ant.queue.push({ error: { status: 500 } });
    const r = await send(gw, u.key, msg('meter-a'));
    expect(r.status).toBe(502);
    expect(await balance(u.id)).toBe(100_000);
    expect(await availableOf(gw, u.id)).toBe(100_000);
    expect(await logOf(r.headers.get('request-id')!)).toMatchObject({ cost: 0, status: 502, error_code: 'upstream_error', output_tokens: 0 });
    expect(await charge(r.headers.get('request-id')!)).toEqual([]);
  });

  test('a stream cut mid-way bills what was delivered, once', async () => {
    const u = await keyedUser(gw, 1_000_000);
    ant.queue.push({ cutAfter: 5, text: 'abcd efgh ijkl mnop', usage: USAGE });
    const r = await send(gw, u.key, msg('meter-a', { stream: true }));
    expect(r.status).toBe(200);
    expect(eventNames(r.text).at(-1)).toBe('error');
    const id = r.headers.get('request-id')!;
    const log = await logOf(id);
    // The upstream reported its input (message_start) but never its final output count: the output is
    // estimated from the text delivered (two short deltas here).
    expect(log.error_code).toBe('upstream_stream_cut');
    expect(log.input_tokens).toBe(1000);
    expect(log.output_tokens).toBeGreaterThanOrEqual(1);
    expect(log.output_tokens).toBeLessThan(200);
    expect(log.cost).toBeGreaterThan(0);
    expect(await charge(id)).toEqual([{ amount: -log.cost }]);
    expect(await balance(u.id)).toBe(1_000_000 - log.cost);
  });

  test('a client that goes away mid-stream cancels the upstream and pays only for what was delivered', async () => {
    const u = await keyedUser(gw, 1_000_000);
    ant.queue.push({ text: 'one two three four five six', chunkDelayMs: 200, usage: USAGE });
    const cancelledBefore = ant.double.cancelled;
    const ctrl = new AbortController();
    const res = await fetch(`${gw.url}/v1/messages`, { method: 'POST', signal: ctrl.signal, headers: { 'content-type': 'application/json', 'vendor-version': '2023-06-01', 'x-api-key': u.key }, body: JSON.stringify(msg('meter-a', { stream: true })) });
    const id = res.headers.get('request-id')!;
    const reader = res.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    expect(first).toContain('message_start');
    ctrl.abort();
    const t0 = Date.now();
    while ((!(await logOf(id)) || ant.double.cancelled === cancelledBefore) && Date.now() - t0 < 3000) await Bun.sleep(20);
    expect(ant.double.cancelled).toBe(cancelledBefore + 1);
    const log = await logOf(id);
    expect(log.error_code).toBe('client_closed');
    expect(log.output_tokens).toBeLessThan(200);
    expect(await charge(id)).toEqual(log.cost > 0 ? [{ amount: -log.cost }] : []);
    expect(await balance(u.id)).toBe(1_000_000 - log.cost);
    expect(await availableOf(gw, u.id)).toBe(1_000_000 - log.cost);
  });
});
