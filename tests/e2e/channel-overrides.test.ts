/**
 * Per-channel parameter and header overrides and the billing-model switch, over real HTTP against the
 * recording upstream doubles: what each op makes the upstream receive (native and OpenAI-translated,
 * JSON and SSE), per-model scoping, the usage log's record of what changed, holds sized on the request
 * after overrides, exact charges under either billing model, and 400s for bad definitions.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, eventNames, keyedUser, msg, send, setPrice, upstream, V, type Scripted, availableOf } from './relay-setup';

let gw: TestGateway;
let ant: Scripted;
let oai: Scripted;
const ids: Record<string, number> = {};

const COMMON = [
  { op: 'clamp', path: 'max_tokens', max: 50 },
  { op: 'remove', path: 'temperature' },
  { op: 'set', path: 'top_p', value: 0.5 },
  { op: 'set_header', name: 'X-Team', value: 'blue' },
  { op: 'remove_header', name: 'user-agent' },
];

async function channel(name: string, o: { type: 'anthropic' | 'openai'; url: string; models: string[]; mapping?: Record<string, string>; fields?: Record<string, unknown> }) {
  ids[name] = await addChannel(gw, { ...o, name });
  if (o.fields) {
    const r = await gw.api('PUT', '/api/channel/', { id: ids[name], ...o.fields });
    expect(r.status).toBe(200);
  }
}

beforeAll(async () => {
  gw = await startGateway();
  ant = upstream('anthropic');
  oai = upstream('openai');
  await channel('native', {
    type: 'anthropic', url: ant.url, models: ['ov-a', 'ov-a-special'],
    fields: {
      header_policy: { forward_headers: ['user-agent', 'x-app'] },
      overrides: [...COMMON, { op: 'set', path: 'top_k', value: 7, models: ['ov-a-spec*'] }, { op: 'set_header', name: 'x-only-special', value: '1', models: ['ov-a-special'] }],
    },
  });
  await channel('openai', {
    type: 'openai', url: oai.url, models: ['ov-o', 'ov-o-special'],
    fields: { header_policy: { forward_headers: ['user-agent'] }, overrides: [...COMMON, { op: 'set', path: 'stop_sequences', value: ['STOP'], models: ['ov-o-spec*'] }] },
  });
  await channel('raise', { type: 'anthropic', url: ant.url, models: ['ov-raise'], fields: { overrides: [{ op: 'set', path: 'max_tokens', value: 8000 }] } });
  // Failover: the first channel clamps, the second does not; each attempt gets its own channel's request.
  await channel('fo-first', { type: 'anthropic', url: ant.url, models: ['ov-fo'], fields: { priority: 10, overrides: [{ op: 'clamp', path: 'max_tokens', max: 50 }] } });
  await channel('fo-second', { type: 'anthropic', url: ant.url, models: ['ov-fo'], fields: { overrides: [{ op: 'set', path: 'top_k', value: 3 }] } });
  // Input priced at 1 unit per token, output free: a hold is exactly the input bound.
  await channel('sys', { type: 'anthropic', url: ant.url, models: ['ov-sys'], fields: { overrides: [{ op: 'set', path: 'system', value: 'x'.repeat(16_000) }] } });
  await channel('plain', { type: 'anthropic', url: ant.url, models: ['ov-plain'] });
  for (const m of ['ov-sys', 'ov-plain']) await setPrice(gw, m, { input: 1_000_000, output: 0 });
  for (const m of ['ov-a', 'ov-a-special', 'ov-o', 'ov-o-special', 'ov-raise', 'ov-fo']) await setPrice(gw, m, { input: 0, output: 1_000_000 });
  // Billing: requested prices 1/2 per token, upstream prices 3/5 per token.
  await channel('bill-req', { type: 'anthropic', url: ant.url, models: ['bill-req'], mapping: { 'bill-req': 'bill-req-up' } });
  await channel('bill-up', { type: 'openai', url: oai.url, models: ['bill-up'], mapping: { 'bill-up': 'bill-up-up' }, fields: { billing_model: 'upstream' } });
  await channel('bill-fallback', { type: 'anthropic', url: ant.url, models: ['bill-fb'], mapping: { 'bill-fb': 'unpriced-up' }, fields: { billing_model: 'upstream' } });
  for (const m of ['bill-req', 'bill-up', 'bill-fb']) await setPrice(gw, m, { input: 1_000_000, output: 2_000_000 });
  for (const m of ['bill-req-up', 'bill-up-up']) await setPrice(gw, m, { input: 3_000_000, output: 5_000_000 });
});
afterAll(async () => { await ant.stop(); await oai.stop(); await gw.stop(); });

const logOf = (requestId: string) => gw.db.get('select * from usage_logs where request_id = ?', requestId);
const CLIENT = { ...V, 'user-agent': 'client/1.0', 'x-app': 'cli' };
const BODY = (model: string, stream: boolean) => msg(model, { max_tokens: 4000, temperature: 0.9, top_p: 0.1, stream });

describe('what the upstream receives', () => {
  for (const stream of [false, true]) {
    const kind = stream ? 'SSE' : 'JSON';
    test(`native ${kind}: clamp, remove, set, header set and remove; the usage log lists them`, async () => {
      const u = await keyedUser(gw);
      const r = await send(gw, u.key, BODY('ov-a', stream), CLIENT);
      expect(r.status).toBe(200);
      if (stream) expect(eventNames(r.text).at(-1)).toBe('message_stop');
      const req = ant.last();
      expect(req.body.max_tokens).toBe(50);
      expect(req.body.temperature).toBeUndefined();
      expect(req.body.top_p).toBe(0.5);
      expect(req.body.top_k).toBeUndefined(); // scoped to ov-a-spec*
      expect(req.body.stream).toBe(stream);
      expect(req.body.messages).toEqual([{ role: 'user', content: 'Hi' }]);
      expect(req.headers['x-team']).toBe('blue');
      expect(req.headers['x-app']).toBe('cli');
      expect(req.headers['user-agent']).not.toBe('client/1.0');
      expect(req.headers['x-only-special']).toBeUndefined();
      expect(req.headers['x-api-key']).toBe('upstream-key');
      const log = await logOf(r.headers.get('request-id')!);
      expect(JSON.parse(log.overrides)).toEqual(['clamp:max_tokens', 'remove:temperature', 'set:top_p', 'set_header:x-team', 'remove_header:user-agent']);
      const view = await gw.api('GET', `/api/log/?model=ov-a&p=1&page_size=1`);
      expect(view.body.data.items[0]).toMatchObject({ request_id: r.headers.get('request-id'), overrides: JSON.parse(log.overrides), billed_model: 'ov-a' });
    });

    test(`OpenAI-translated ${kind}: the same ops reach the translated request`, async () => {
      const u = await keyedUser(gw);
      const r = await send(gw, u.key, BODY('ov-o', stream), CLIENT);
      expect(r.status).toBe(200);
      const req = oai.last();
      expect(req.body.max_completion_tokens).toBe(50);
      expect(req.body.temperature).toBeUndefined();
      expect(req.body.top_p).toBe(0.5);
      expect(req.body.stop).toBeUndefined();
      expect(req.headers['x-team']).toBe('blue');
      expect(req.headers['user-agent']).not.toBe('client/1.0');
      expect(req.headers.authorization).toBe('Bearer upstream-key');
      expect(JSON.parse((await logOf(r.headers.get('request-id')!)).overrides)).toEqual(['clamp:max_tokens', 'remove:temperature', 'set:top_p', 'set_header:x-team', 'remove_header:user-agent']);
    });

    test(`per-model entries apply only to their models (${kind})`, async () => {
      const u = await keyedUser(gw);
      expect((await send(gw, u.key, BODY('ov-a-special', stream), CLIENT)).status).toBe(200);
      expect(ant.last().body.top_k).toBe(7);
      expect(ant.last().headers['x-only-special']).toBe('1');
      const r = await send(gw, u.key, BODY('ov-o-special', stream), CLIENT);
      expect(r.status).toBe(200);
      expect(oai.last().body.stop).toEqual(['STOP']);
      expect(JSON.parse((await logOf(r.headers.get('request-id')!)).overrides)).toContain('set:stop_sequences');
    });
  }

  test('a channel test sends its minimal request with the overrides, except on max_tokens (it stays 1 token)', async () => {
    const r = await gw.api('POST', `/api/channel/${ids.raise}/test`);
    expect(r.body.data.success).toBe(true);
    expect(ant.last().body.max_tokens).toBe(1);
    const t = await gw.api('POST', `/api/channel/${ids.native}/test?model=ov-a-special`);
    expect(t.body.data.success).toBe(true);
    expect(ant.last().body).toMatchObject({ max_tokens: 1, top_p: 0.5, top_k: 7 });
    expect(ant.last().headers).toMatchObject({ 'x-team': 'blue', 'x-only-special': '1' });
  });

  test('an override that changes nothing is not logged; the client\'s own values pass when no entry touches them', async () => {
    const u = await keyedUser(gw);
    const r = await send(gw, u.key, msg('ov-raise', { max_tokens: 8000, temperature: 0.3 }));
    expect(r.status).toBe(200);
    expect(ant.last().body).toMatchObject({ max_tokens: 8000, temperature: 0.3 });
    expect((await logOf(r.headers.get('request-id')!)).overrides).toBe('');
    const view = await gw.api('GET', '/api/log/self', undefined, u.token);
    expect(view.body.data.items[0]).toMatchObject({ overrides: [], billed_model: 'ov-raise' });
  });

  test('users do not see which overrides ran (channel configuration); admins do', async () => {
    const u = await keyedUser(gw);
    expect((await send(gw, u.key, BODY('ov-a', false), CLIENT)).status).toBe(200);
    gw.services.relay.quota.flush();
    expect((await gw.api('GET', '/api/log/self', undefined, u.token)).body.data.items[0].overrides).toEqual([]);
  });
});

describe('metering uses the request after overrides', () => {
  // Input is free and output costs 1 unit per token: a request's worst case is exactly its max_tokens.
  // Read once the upstream has the request (the hold is taken before it is called) and while it keeps it: a fixed
  // 200 ms head start within a 400 ms answer could read before a loaded 3-node run had admitted it, or after it ended.
  const heldDuring = async (model: string, body: Record<string, unknown>, up: Scripted) => {
    const u = await keyedUser(gw, 1_000_000);
    const hits = up.hits;
    up.queue.push({ delayMs: 1000, usage: { input: 10, output: 5 } });
    const pending = send(gw, u.key, msg(model, body));
    while (up.hits === hits) await Bun.sleep(10);
    const held = 1_000_000 - await availableOf(gw, u.id);
    const r = await pending;
    expect(r.status).toBe(200);
    return { held, u, r };
  };

  test('a clamped max_tokens lowers the hold; a raised one raises it', async () => {
    expect((await heldDuring('ov-a', { max_tokens: 4000 }, ant)).held).toBe(50);
    expect((await heldDuring('ov-o', { max_tokens: 4000 }, oai)).held).toBe(50);
    expect((await heldDuring('ov-raise', { max_tokens: 10 }, ant)).held).toBe(8000);
  }, 20_000);

  test('a system prompt set by an override is measured into the hold (16,000 ASCII characters: 8,000 tokens of bound)', async () => {
    const plain = (await heldDuring('ov-plain', { max_tokens: 10, system: 'short' }, ant)).held;
    const sys = await heldDuring('ov-sys', { max_tokens: 10, system: 'short' }, ant);
    expect(ant.last().body.system).toBe('x'.repeat(16_000));
    expect(sys.held - plain).toBe(8_000 - 3); // the client's 'short' (3 tokens of bound) is replaced
  }, 20_000);

  test('a raised max_tokens the balance cannot cover is refused (402) before the upstream is called', async () => {
    const u = await keyedUser(gw, 1000);
    const hits = ant.hits;
    const r = await send(gw, u.key, msg('ov-raise', { max_tokens: 10 }));
    expect(r.status).toBe(402);
    expect(r.body.error.message).toContain('up to 8000 quota units');
    expect(ant.hits).toBe(hits);
    // The clamp lets a request through that its own max_tokens could not afford.
    const ok = await send(gw, u.key, msg('ov-a', { max_tokens: 100_000 }));
    expect(ok.status).toBe(200);
  });

  test('on failover each channel gets its own overrides; the hold covers both; the log and limits follow the one that served', async () => {
    const u = await keyedUser(gw, 1_000_000);
    const hits = ant.hits;
    ant.queue.push({ error: { status: 500 }, delayMs: 1000 }, { usage: { input: 10, output: 100 } });
    const pending = send(gw, u.key, msg('ov-fo', { max_tokens: 4000 }));
    // During the first attempt (as heldDuring reads it).
    while (ant.hits === hits) await Bun.sleep(10);
    expect(1_000_000 - await availableOf(gw, u.id)).toBe(4000);
    const r = await pending;
    expect(r.status).toBe(200);
    const [first, second] = ant.double.requests.slice(-2);
    expect([first!.body.max_tokens, first!.body.top_k]).toEqual([50, undefined]);
    expect([second!.body.max_tokens, second!.body.top_k]).toEqual([4000, 3]);
    const log = await logOf(r.headers.get('request-id')!);
    expect(log).toMatchObject({ attempts: 2, channel_id: ids['fo-second'], overrides: '["set:top_k"]', output_tokens: 100, cost: 100, usage_flag: '' });
  });

  test('usage beyond the clamped max_tokens is implausible and billed at the clamp', async () => {
    const u = await keyedUser(gw, 1_000_000);
    ant.queue.push({ usage: { input: 10, output: 80 } });
    const r = await send(gw, u.key, msg('ov-a', { max_tokens: 4000 }));
    expect(r.status).toBe(200);
    const log = await logOf(r.headers.get('request-id')!);
    expect(log).toMatchObject({ output_tokens: 50, cost: 50, usage_flag: 'implausible' });
  });
});

describe('billing model', () => {
  const bill = async (model: string, stream: boolean, up: Scripted) => {
    const u = await keyedUser(gw, 1_000_000);
    up.queue.push({ usage: { input: 1000, output: 500 } });
    const r = await send(gw, u.key, msg(model, { stream, max_tokens: 1000 }));
    expect(r.status).toBe(200);
    const log = await logOf(r.headers.get('request-id')!);
    gw.services.relay.quota.flush();
    return { log, spent: 1_000_000 - (await gw.services.users.byId(u.id))!.quota };
  };

  for (const stream of [false, true]) {
    test(`requested (default) bills the requested model, upstream the mapped one, exactly (${stream ? 'SSE' : 'JSON'})`, async () => {
      const req = await bill('bill-req', stream, ant);
      expect(req.log).toMatchObject({ model: 'bill-req', upstream_model: 'bill-req-up', billed_model: 'bill-req', cost: 2000 });
      expect(req.spent).toBe(2000); // 1000 × 1 + 500 × 2
      const up = await bill('bill-up', stream, oai);
      expect(up.log).toMatchObject({ model: 'bill-up', upstream_model: 'bill-up-up', billed_model: 'bill-up-up', cost: 5500 });
      expect(up.spent).toBe(5500); // 1000 × 3 + 500 × 5
    });
  }

  test('an upstream model without a price bills the requested one, and the log says so', async () => {
    const r = await bill('bill-fb', false, ant);
    expect(r.log).toMatchObject({ upstream_model: 'unpriced-up', billed_model: 'bill-fb', cost: 2000 });
  });

  test('switching the channel setting takes effect on the next request; the view shows it', async () => {
    const put = await gw.api('PUT', '/api/channel/', { id: ids['bill-req'], billing_model: 'upstream' });
    expect(put.status).toBe(200);
    expect(put.body.data.billing_model).toBe('upstream');
    const r = await bill('bill-req', false, ant);
    expect(r.log).toMatchObject({ billed_model: 'bill-req-up', cost: 5500 });
    const self = await gw.api('GET', `/api/log/?model=bill-req&p=1&page_size=1`);
    expect(self.body.data.items[0]).toMatchObject({ model: 'bill-req', upstream_model: 'bill-req-up', billed_model: 'bill-req-up', cost: 5500 });
    await gw.api('PUT', '/api/channel/', { id: ids['bill-req'], billing_model: 'requested' });
    expect((await bill('bill-req', false, ant)).log.cost).toBe(2000);
  });

  test('the hold of an upstream-billed request is sized at the upstream price', async () => {
    const u = await keyedUser(gw, 1000);
    // 100 output tokens: 200 units at the requested price, 500 at the upstream price, plus the input bound.
    const r = await send(gw, u.key, msg('bill-up', { max_tokens: 100 }));
    expect(r.status).toBe(200);
    const tight = await keyedUser(gw, 400);
    const refused = await send(gw, tight.key, msg('bill-up', { max_tokens: 100 }));
    expect(refused.status).toBe(402);
    expect(Number(/up to (\d+)/.exec(refused.body.error.message)![1])).toBeGreaterThanOrEqual(500);
  });
});

describe('definitions on the API', () => {
  test('the view shows overrides (header names lower-cased) and billing_model; defaults are [] and requested', async () => {
    const d = await gw.api('GET', `/api/channel/${ids.native}`);
    expect(d.body.data.overrides[3]).toEqual({ op: 'set_header', name: 'x-team', value: 'blue' });
    expect(d.body.data.billing_model).toBe('requested');
    const plain = await gw.api('GET', `/api/channel/${ids['bill-fallback']}`);
    expect(plain.body.data).toMatchObject({ overrides: [], billing_model: 'upstream' });
  });

  test('bad definitions are 400 with the error object naming the entry, on create and update, and change nothing', async () => {
    const base = { name: 'bad', type: 'anthropic', base_url: ant.url, key: 'k', models: ['bad'] };
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ overrides: [{ op: 'set_header', name: 'Authorization', value: 'Bearer x' }] }, 'overrides[0].name'],
      [{ overrides: [{ op: 'remove', path: 'top_p' }, { op: 'remove', path: 'max_tokens' }] }, 'overrides[1].path'],
      [{ overrides: [{ op: 'set', path: 'temperature', value: 7 }] }, 'overrides[0].value'],
      [{ overrides: [{ op: 'clamp', path: 'max_tokens', min: 10, max: 5 }] }, 'overrides[0].min'],
      [{ overrides: [{ op: 'set', path: 'model', value: 'other' }] }, 'overrides[0].path'],
    ];
    for (const [fields, param] of cases) {
      for (const [method, body] of [['POST', { ...base, ...fields }], ['PUT', { id: ids.native, ...fields }]] as const) {
        const r = await gw.api(method, '/api/channel/', body);
        expect({ method, param: r.body.error?.param }).toEqual({ method, param });
        expect(r.status).toBe(400);
        expect(r.body).toMatchObject({ success: false, error: { type: 'invalid_request_error', code: 'invalid_value' } });
        expect(r.body.error.message.length).toBeGreaterThan(10);
      }
    }
    for (const fields of [{ overrides: [{ op: 'rename', path: 'x' }] }, { overrides: [{ op: 'set', path: 'x', value: 1, extra: true }] }, { overrides: 'clamp' }, { billing_model: 'cheapest' }]) {
      const r = await gw.api('PUT', '/api/channel/', { id: ids.native, ...fields });
      expect(r.status).toBe(400);
      expect(r.body.error.param).toStartWith(Object.keys(fields)[0]!);
    }
    expect((await gw.api('GET', `/api/channel/${ids.native}`)).body.data.overrides).toHaveLength(7);
    expect((await gw.api('GET', '/api/channel/?keyword=bad')).body.data.total).toBe(0);
  });

  test('the OpenAPI document describes both fields on create, update and the view, and the log fields', async () => {
    const doc = await (await fetch(`${gw.url}/openapi/json`)).json() as any;
    const schemas = doc.components.schemas;
    for (const name of ['ChannelCreate', 'ChannelUpdate', 'ChannelView']) {
      const text = JSON.stringify(schemas[name].properties);
      for (const s of ['"overrides"', '"billing_model"', 'set_header', 'remove_header', 'upstream']) expect({ name, s, found: text.includes(s) }).toEqual({ name, s, found: true });
    }
    expect(JSON.stringify(doc)).toContain('billed_model');
  });
});
