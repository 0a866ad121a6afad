/**
 * Code execution (Anthropic's code-execution server tool) is billed per call on top of tokens, over real HTTP:
 * - a request with the tool on a model whose price sets no `code_execution` is refused 403 tool_not_priced
 *   before anything is sent or held (a model without any price is free under BILLING_REQUIRE_PRICE=false);
 * - each server_tool_use block named code_execution, bash_code_execution or text_editor_code_execution in the
 *   answer is one call at the price's code_execution (× the group ratio), from JSON answers and native streams,
 *   a cut stream billing the calls delivered;
 * - the reservation adds CODE_EXECUTION_MAX_CALLS × the price, and a count above it is clamped (implausible).
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, send, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
let ant: Scripted;
let oai: Scripted;
// 1 unit per input token, 2 per output token; a context window of 1,000 tokens keeps the worst case small:
// a server tool makes the input unmeasurable, so the request reserves 1,000 + 100 × 2 = 1,200 for tokens.
const PRICE = { input: 1_000_000, output: 2_000_000, cache_read: 0, cache_write: 0, context_window: 1000 };
const CALL = 2084;
const MAX_CALLS = 5;
const TOKENS_WORST = 1000 + 100 * 2;
const CE = { type: 'code_execution_20250825', name: 'code_execution' };
const CUSTOM = { name: 'lookup', input_schema: { type: 'object' } };
// 10 input tokens + 5 output tokens = 20 units.
const USAGE = { input: 10, output: 5 };
const TOKENS_COST = 10 + 5 * 2;
const THREE = [{ name: 'code_execution' }, { name: 'bash_code_execution', input: { command: 'ls' } }, { name: 'text_editor_code_execution', input: { command: 'view', path: 'a.py' } }];

beforeAll(async () => {
  gw = await startGateway({ CODE_EXECUTION_MAX_CALLS: String(MAX_CALLS) });
  ant = upstream('anthropic');
  oai = upstream('openai');
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['ce', 'ce-unpriced'], group: 'default,gold' });
  expect((await gw.api('POST', '/api/group/', { name: 'gold', ratio: 1500 })).status).toBe(200);
  await addChannel(gw, { type: 'openai', url: oai.url, models: ['ce-oai'] });
  for (const model of ['ce', 'ce-oai']) {
    const r = await gw.api('PUT', '/api/pricing/', { model, ...PRICE, code_execution: CALL });
    expect(r.status).toBe(200);
    expect(r.body.data.code_execution).toBe(CALL);
  }
  expect((await gw.api('PUT', '/api/pricing/', { model: 'ce-unpriced', ...PRICE })).body.data.code_execution).toBeNull();
});
afterAll(async () => { await ant.stop(); await oai.stop(); await gw.stop(); });

// The committed balance (settlements flushed first).
const balanceOf = async (id: number) => { gw.services.relay.quota.flush(); return (await gw.services.users.byId(id))!.quota; };
const logOf = (requestId: string | null) => gw.db.get('select * from usage_logs where request_id = ?', requestId);

describe('code execution is refused on a model whose price sets no code_execution', () => {
  test('403 tool_not_priced naming the tool, in any spelling of its type; nothing sent, held or charged', async () => {
    const u = await keyedUser(gw, 1_000_000);
    const hits = ant.hits;
    for (const type of ['code_execution_20250825', 'code_execution_20250522', ' Code_Execution_20250825']) {
      const r = await send(gw, u.key, msg('ce-unpriced', { tools: [CUSTOM, { type, name: 'code_execution' }] }));
      expect(r.status).toBe(403);
      expect(r.body.error).toMatchObject({ param: 'tools.1' });
      expect(JSON.stringify(r.body)).toContain('tool_not_priced');
    }
    const stream = await send(gw, u.key, msg('ce-unpriced', { stream: true, tools: [CE] }));
    expect(stream.status).toBe(403);
    expect(ant.hits).toBe(hits);
    expect(await balanceOf(u.id)).toBe(1_000_000);
    expect(await gw.db.get('select count(*) as n from usage_logs where user_id = ? and cost > 0', u.id)).toMatchObject({ n: 0 });
    // The same model without the tool is served.
    ant.queue.push({ usage: USAGE });
    expect((await send(gw, u.key, msg('ce-unpriced', { tools: [CUSTOM] }))).status).toBe(200);
    expect(ant.hits).toBe(hits + 1);
  });

  test('an OpenAI-compatible channel still refuses the server tool (400 unsupported_tool) on a priced model; nothing charged', async () => {
    const u = await keyedUser(gw, 1_000_000);
    const hits = oai.hits;
    const r = await send(gw, u.key, msg('ce-oai', { tools: [CE] }));
    expect(r.status).toBe(400);
    expect(r.body.error.message).toContain('code_execution_20250825');
    expect(oai.hits).toBe(hits);
    expect(await balanceOf(u.id)).toBe(1_000_000);
    // Unpriced there too: the price check answers first.
    expect((await gw.api('PUT', '/api/pricing/', { model: 'ce-oai', ...PRICE })).status).toBe(200);
    expect((await send(gw, u.key, msg('ce-oai', { tools: [CE] }))).status).toBe(403);
    expect((await gw.api('PUT', '/api/pricing/', { model: 'ce-oai', ...PRICE, code_execution: CALL })).status).toBe(200);
  });
});

describe('code-execution calls are billed per call', () => {
  test('JSON answer with 3 calls (code_execution, bash_code_execution, text_editor_code_execution): tokens + 3 × the price, exactly', async () => {
    const u = await keyedUser(gw, 1_000_000);
    // A long answer: native answers above 1 KB are normally forwarded as bytes without decoding the content.
    ant.queue.push({ usage: USAGE, codeExecution: THREE, text: 'The result is 1. '.repeat(100) });
    const r = await send(gw, u.key, msg('ce', { tools: [CE] }));
    expect(r.status).toBe(200);
    expect(r.body.content.filter((b: any) => b.type === 'server_tool_use').map((b: any) => b.name)).toEqual(THREE.map((c) => c.name));
    expect(ant.last().body.tools).toEqual([CE]);
    const cost = TOKENS_COST + 3 * CALL;
    expect(await logOf(r.headers.get('request-id'))).toMatchObject({ code_execution_requests: 3, cost, usage_flag: '' });
    expect(await balanceOf(u.id)).toBe(1_000_000 - cost);
    // The usage log API shows the count, and the exports: a CSV column, a JSON Lines field.
    const logs = await gw.api('GET', `/api/log/?user_id=${u.id}`);
    expect(logs.body.data.items[0]).toMatchObject({ code_execution_requests: 3, cost });
    const get = (path: string) => fetch(gw.url + path, { headers: { authorization: `Bearer ${gw.rootToken}` } }).then((x) => x.text());
    const [head, line] = (await get(`/api/log/export?format=csv&user_id=${u.id}`)).trim().split('\r\n');
    const cols = head!.split(',');
    expect(line!.split(',')[cols.indexOf('code_execution_requests')]).toBe('3');
    expect(JSON.parse((await get(`/api/log/export?format=jsonl&user_id=${u.id}`)).trim())).toMatchObject({ code_execution_requests: 3, cost });
  });

  test('a short JSON answer (decoded) with one call: tokens + 1 × the price', async () => {
    const u = await keyedUser(gw, 1_000_000);
    ant.queue.push({ usage: USAGE, codeExecution: [{}], text: 'ok' });
    const r = await send(gw, u.key, msg('ce', { tools: [CE] }));
    expect(r.status).toBe(200);
    expect(await logOf(r.headers.get('request-id'))).toMatchObject({ code_execution_requests: 1, cost: TOKENS_COST + CALL, usage_flag: '' });
  });

  test('stream with 3 calls: tokens + 3 × the price', async () => {
    const u = await keyedUser(gw, 1_000_000);
    ant.queue.push({ usage: USAGE, codeExecution: THREE });
    const r = await send(gw, u.key, msg('ce', { stream: true, tools: [CE] }));
    expect(r.status).toBe(200);
    expect(r.text).toContain('"name":"text_editor_code_execution"');
    const cost = TOKENS_COST + 3 * CALL;
    expect(await logOf(r.headers.get('request-id'))).toMatchObject({ code_execution_requests: 3, cost, usage_flag: '' });
    expect(await balanceOf(u.id)).toBe(1_000_000 - cost);
  });

  test('a stream cut after two calls were delivered (before its message_delta) bills those two', async () => {
    const u = await keyedUser(gw, 1_000_000);
    // message_start; per call: server_tool_use start, 3 deltas, stop, result start, stop (7 frames). 9 frames:
    // the first call whole and the second's content_block_start.
    ant.queue.push({ usage: USAGE, codeExecution: THREE, cutAfter: 9 });
    const r = await send(gw, u.key, msg('ce', { stream: true, tools: [CE] }));
    expect(r.status).toBe(200);
    const row = await logOf(r.headers.get('request-id'));
    expect(row).toMatchObject({ code_execution_requests: 2 });
    expect(row.error_code).not.toBe('');
    expect(row.usage_flag).toContain('estimated');
    expect(row.cost).toBe(row.input_tokens + row.output_tokens * 2 + 2 * CALL);
  });

  test('more calls than CODE_EXECUTION_MAX_CALLS are clamped to it and flagged implausible (JSON and stream)', async () => {
    const seven = Array.from({ length: 7 }, () => ({}));
    for (const stream of [false, true]) {
      const u = await keyedUser(gw, 1_000_000);
      ant.queue.push({ usage: USAGE, codeExecution: seven });
      const r = await send(gw, u.key, msg('ce', { stream, tools: [CE] }));
      expect(r.status).toBe(200);
      const cost = TOKENS_COST + MAX_CALLS * CALL;
      expect(await logOf(r.headers.get('request-id'))).toMatchObject({ code_execution_requests: MAX_CALLS, cost, usage_flag: 'implausible' });
      expect(await balanceOf(u.id)).toBe(1_000_000 - cost);
    }
  });

  test('calls in an answer to a request without the tool are not billed (flagged implausible)', async () => {
    const u = await keyedUser(gw, 1_000_000);
    ant.queue.push({ usage: USAGE, codeExecution: [{}] });
    const r = await send(gw, u.key, msg('ce'));
    expect(r.status).toBe(200);
    expect(await logOf(r.headers.get('request-id'))).toMatchObject({ code_execution_requests: 0, cost: TOKENS_COST, usage_flag: 'implausible' });
  });

  test('a balance that covers the tokens but not CODE_EXECUTION_MAX_CALLS × the price is refused 402 before the upstream is called', async () => {
    const worst = TOKENS_WORST + MAX_CALLS * CALL;
    const poor = await keyedUser(gw, worst - 1);
    const hits = ant.hits;
    expect((await send(gw, poor.key, msg('ce', { tools: [CE] }))).status).toBe(402);
    expect((await send(gw, poor.key, msg('ce', { stream: true, tools: [CE] }))).status).toBe(402);
    expect(ant.hits).toBe(hits);
    expect(await balanceOf(poor.id)).toBe(worst - 1);
    // The same balance without the tool is plenty.
    ant.queue.push({ usage: USAGE });
    expect((await send(gw, poor.key, msg('ce'))).status).toBe(200);
    // Exactly the worst case is enough.
    const enough = await keyedUser(gw, worst);
    ant.queue.push({ usage: USAGE, codeExecution: Array.from({ length: MAX_CALLS }, () => ({})) });
    const r = await send(gw, enough.key, msg('ce', { tools: [CE] }));
    expect(r.status).toBe(200);
    expect(ant.hits).toBe(hits + 2);
    expect(await balanceOf(enough.id)).toBe(worst - TOKENS_COST - MAX_CALLS * CALL);
  });

  test('the group\'s price ratio applies to calls like tokens, in the reservation and the charge, one rounding', async () => {
    // Worst case ×1.5: (1,200 + 5 × 2,084) × 1.5 = 17,430; one unit less is refused.
    const worst = (TOKENS_WORST + MAX_CALLS * CALL) * 1.5;
    const poor = await keyedUser(gw, worst - 1);
    expect((await gw.api('PUT', '/api/token/', { id: poor.keyId, group: 'gold' })).status).toBe(200);
    expect((await send(gw, poor.key, msg('ce', { tools: [CE] }))).status).toBe(402);
    const u = await keyedUser(gw, worst);
    expect((await gw.api('PUT', '/api/token/', { id: u.keyId, group: 'gold' })).status).toBe(200);
    // 11 input tokens + 5 output + 1 call = 2,105 × 1.5 = 3,157.5 → 3,158.
    ant.queue.push({ usage: { input: 11, output: 5 }, codeExecution: [{}] });
    const r = await send(gw, u.key, msg('ce', { tools: [CE] }));
    expect(r.status).toBe(200);
    expect(await logOf(r.headers.get('request-id'))).toMatchObject({ code_execution_requests: 1, cost: 3158, price_ratio: 1500 });
  });

  test('the price: a non-negative integer or null; 0 allows the tool for free', async () => {
    for (const bad of [-1, 1.5, '5']) expect((await gw.api('PUT', '/api/pricing/', { model: 'ce-bad', ...PRICE, code_execution: bad })).status).toBe(400);
    expect((await gw.api('GET', '/api/pricing/ce')).body.data.code_execution).toBe(CALL);
    expect((await gw.api('PUT', '/api/pricing/', { model: 'ce-unpriced', ...PRICE, code_execution: 0 })).body.data.code_execution).toBe(0);
    const u = await keyedUser(gw, 1_000_000);
    ant.queue.push({ usage: USAGE, codeExecution: [{}] });
    const r = await send(gw, u.key, msg('ce-unpriced', { tools: [CE] }));
    expect(r.status).toBe(200);
    expect(await logOf(r.headers.get('request-id'))).toMatchObject({ code_execution_requests: 1, cost: TOKENS_COST });
    expect((await gw.api('PUT', '/api/pricing/', { model: 'ce-unpriced', ...PRICE })).status).toBe(200);
  });
});

describe('calls an upstream spells with JSON escapes are still counted', () => {
  // An Anthropic-compatible upstream may escape any character of a JSON string: `code\u005fexecution` is the
  // name code_execution once parsed, and runs (and costs) as one. Byte scans for "code_execution" miss it.
  const ESCAPED = 'code\\u005fexecution';
  const usage = { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
  const blocks = (text: string) => `[{"type":"server_tool_use","id":"srvtoolu_1","name":"${ESCAPED}","input":{"code":"print(1)"}},`
    + `{"type":"${ESCAPED}_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"${ESCAPED}_result","stdout":"1\\n","stderr":"","return_code":0}},`
    + `{"type":"text","text":${JSON.stringify(text)}}]`;
  const ev = (type: string, data: string) => `event: ${type}\ndata: ${data}\n\n`;
  let raw: ReturnType<typeof Bun.serve>;
  beforeAll(async () => {
    raw = Bun.serve({
      port: 0,
      async fetch(req) {
        const body = await req.json() as { model: string; stream?: boolean };
        if (!body.stream) {
          // Long (passed as bytes when nothing needs decoding) and short (always decoded).
          const text = body.model === 'ce-raw-short' ? 'ok' : 'The result is 1. '.repeat(100);
          return new Response(`{"id":"msg_raw","type":"message","role":"assistant","model":"${body.model}","content":${blocks(text)},"stop_reason":"end_turn","stop_sequence":null,"usage":${JSON.stringify(usage)}}`,
            { headers: { 'content-type': 'application/json' } });
        }
        const frames = [
          ev('message_start', JSON.stringify({ type: 'message_start', message: { id: 'msg_raw', type: 'message', role: 'assistant', model: body.model, content: [], stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 1 } } })),
          ev('content_block_start', `{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"${ESCAPED}","input":{}}}`),
          ev('content_block_delta', '{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\\"code\\":\\"print(1)\\"}"}}'),
          ev('content_block_stop', '{"type":"content_block_stop","index":0}'),
          ev('message_delta', JSON.stringify({ type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage })),
          ev('message_stop', '{"type":"message_stop"}'),
        ];
        // CRLF line ends take the generic parser path; LF the byte framer.
        const crlf = body.model === 'ce-raw-crlf';
        return new Response(frames.map((f) => (crlf ? f.replaceAll('\n', '\r\n') : f)).join(''), { headers: { 'content-type': 'text/event-stream' } });
      },
    });
    await addChannel(gw, { type: 'anthropic', url: `http://127.0.0.1:${raw.port}`, models: ['ce-raw', 'ce-raw-short', 'ce-raw-crlf'], name: 'ch-raw' });
    for (const model of ['ce-raw', 'ce-raw-short', 'ce-raw-crlf']) expect((await gw.api('PUT', '/api/pricing/', { model, ...PRICE, code_execution: CALL })).status).toBe(200);
  });
  afterAll(() => raw.stop(true));

  for (const [model, stream] of [['ce-raw', false], ['ce-raw-short', false], ['ce-raw', true], ['ce-raw-crlf', true]] as const) {
    test(`${model}, ${stream ? 'stream' : 'JSON'}: the escaped call is billed`, async () => {
      const u = await keyedUser(gw, 1_000_000);
      const r = await send(gw, u.key, msg(model, { stream, tools: [CE] }));
      expect(r.status).toBe(200);
      const cost = TOKENS_COST + CALL;
      expect(await logOf(r.headers.get('request-id'))).toMatchObject({ code_execution_requests: 1, cost });
      expect(await balanceOf(u.id)).toBe(1_000_000 - cost);
    });
  }
});

describe('BILLING_REQUIRE_PRICE=false', () => {
  test('a model without any price is free, the tool included; one priced without code_execution is still refused', async () => {
    const free = await startGateway({ BILLING_REQUIRE_PRICE: 'false' });
    const up = upstream('anthropic');
    try {
      await addChannel(free, { type: 'anthropic', url: up.url, models: ['ce-free', 'ce-half'] });
      expect((await free.api('PUT', '/api/pricing/', { model: 'ce-half', ...PRICE })).status).toBe(200);
      const u = await keyedUser(free, 1_000);
      up.queue.push({ usage: USAGE, codeExecution: [{}] });
      expect((await send(free, u.key, msg('ce-free', { tools: [CE] }))).status).toBe(200);
      const hits = up.hits;
      const r = await send(free, u.key, msg('ce-half', { tools: [CE] }));
      expect(r.status).toBe(403);
      expect(r.body.error).toMatchObject({ param: 'tools.0' });
      expect(up.hits).toBe(hits);
    } finally {
      await up.stop();
      await free.stop();
    }
  }, 20_000);
});

describe('a call in an event named otherwise is still counted', () => {
  // The official SDKs read an event by its data's `type` (its name only picks which events they read: a
  // content_block_delta is read) and data-only clients read only the data: a content_block_start of a call sent
  // under another name (or none) reaches the client as a call, and ran (and cost) as one upstream.
  const usage = { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
  const CALL_START = '{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_h","name":"bash_code_execution","input":{}}}';
  const frames = (name: string | null) => [
    `event: message_start\ndata: ${JSON.stringify({ type: 'message_start', message: { id: 'msg_h', type: 'message', role: 'assistant', model: 'm', content: [], stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 1 } } })}\n\n`,
    `${name === null ? '' : `event: ${name}\n`}data: ${CALL_START}\n\n`,
    'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
    `event: message_delta\ndata: ${JSON.stringify({ type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage })}\n\n`,
    'event: message_stop\ndata: {"type":"message_stop"}\n\n',
  ];
  for (const name of ['content_block_delta', 'content_block_stop', 'ping', null]) {
    for (const crlf of [false, true]) {
      test(`named ${name ?? '(none)'} (${crlf ? 'generic parser, \\r\\n' : 'byte framer'}): billed as one call`, async () => {
        const u = await keyedUser(gw, 1_000_000);
        const body = frames(name).join('');
        ant.queue.push({ response: () => new Response(crlf ? body.replaceAll('\n', '\r\n') : body, { headers: { 'content-type': 'text/event-stream' } }) });
        const r = await send(gw, u.key, msg('ce', { stream: true, tools: [CE] }));
        expect(r.status).toBe(200);
        expect(r.text).toContain('"name":"bash_code_execution"');
        const cost = TOKENS_COST + CALL;
        expect(await logOf(r.headers.get('request-id'))).toMatchObject({ code_execution_requests: 1, cost });
        expect(await balanceOf(u.id)).toBe(1_000_000 - cost);
      });
    }
  }
});
