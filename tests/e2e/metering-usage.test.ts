/**
 * A served request is never free and never an exception: hostile usage numbers from the upstream
 * (fractions, 1e400, negatives, strings, null, unsafe integers, counts beyond max_tokens, cached beyond
 * prompt) are validated in one place, replaced by the estimate or the reservation's figure, flagged on
 * the usage row, and billed — for JSON and SSE, native and translated.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, send, upstream, type Scripted, availableOf } from './relay-setup';

let gw: TestGateway;
let ant: Scripted;
let oai: Scripted;
let user: Awaited<ReturnType<typeof keyedUser>>;
const PRICE = { input: 1_000_000, output: 2_000_000, cache_read: 100_000, cache_write: 1_250_000 };
const REPLY = 'Hello there, this is a reply';

beforeAll(async () => {
  gw = await startGateway();
  ant = upstream('anthropic');
  oai = upstream('openai');
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['ant'] });
  await addChannel(gw, { type: 'openai', url: oai.url, models: ['oai'] });
  for (const model of ['ant', 'oai']) expect((await gw.api('PUT', '/api/pricing/', { model, ...PRICE })).status).toBe(200);
  user = await keyedUser(gw, 10_000_000);
});
afterAll(async () => { await ant.stop(); await oai.stop(); await gw.stop(); });

const logOf = (id: string) => gw.db.get('select * from usage_logs where request_id = ?', id);

const sse = (frames: string[]) => () => new Response(frames.join(''), { headers: { 'content-type': 'text/event-stream' } });
const json = (text: string) => () => new Response(text, { headers: { 'content-type': 'application/json' } });

/** Raw upstream bodies with usage literals spliced in as text, so 1e400 and unsafe integers reach the gateway as sent. */
const bodies = {
  antJson: (inp: string, out: string) => json(`{"id":"msg_h","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"${REPLY}"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":${inp},"output_tokens":${out},"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`),
  antSse: (inp: string, out: string) => sse([
    `event: message_start\ndata: {"type":"message_start","message":{"id":"msg_h","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":${inp},"output_tokens":1}}}\n\n`,
    'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n',
    `event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"${REPLY}"}}\n\n`,
    'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
    `event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":${out}}}\n\n`,
    'event: message_stop\ndata: {"type":"message_stop"}\n\n',
  ]),
  oaiJson: (inp: string, out: string, cached = '0') => json(`{"id":"chatcmpl-h","object":"chat.completion","created":1700000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"${REPLY}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":${inp},"completion_tokens":${out},"total_tokens":0,"prompt_tokens_details":{"cached_tokens":${cached}}}}`),
  oaiSse: (inp: string, out: string, cached = '0') => sse([
    `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"${REPLY}"},"finish_reason":null}]}\n\n`,
    'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":${inp},"completion_tokens":${out},"total_tokens":0,"prompt_tokens_details":{"cached_tokens":${cached}}}}\n\n`,
    'data: [DONE]\n\n',
  ]),
};
const ROUTES = [
  { name: 'anthropic json', model: 'ant', stream: false, up: () => ant, body: bodies.antJson },
  { name: 'anthropic sse', model: 'ant', stream: true, up: () => ant, body: bodies.antSse },
  { name: 'openai json', model: 'oai', stream: false, up: () => oai, body: bodies.oaiJson },
  { name: 'openai sse', model: 'oai', stream: true, up: () => oai, body: bodies.oaiSse },
] as const;
const HOSTILE = ['1.5', '1e400', '-5', '"7"', 'null', '9007199254740993', '1e20', '{}', 'true'];

async function call(route: (typeof ROUTES)[number], inp: string, out: string, maxTokens = 100) {
  route.up().queue.push({ response: route.body(inp, out) });
  const r = await send(gw, user.key, { model: route.model, max_tokens: maxTokens, stream: route.stream, messages: [{ role: 'user', content: 'Say hello' }] });
  expect(r.status).toBe(200);
  return (await logOf(r.headers.get('request-id')!));
}

const expectSaneRow = (row: any, maxOutput: number) => {
  for (const k of ['input_tokens', 'output_tokens', 'cache_read_tokens', 'cache_write_tokens', 'cost']) {
    expect(Number.isSafeInteger(row[k]) && row[k] >= 0).toBe(true);
  }
  expect(row.output_tokens).toBeLessThanOrEqual(maxOutput);
  expect(row.cost).toBeGreaterThan(0);
};

describe('hostile usage is validated, billed and flagged', () => {
  for (const route of ROUTES) {
    test(`${route.name}: every hostile output count is billed (estimate), flagged invalid`, async () => {
      for (const bad of HOSTILE) {
        const row = await call(route, '40', bad);
        expectSaneRow(row, 100);
        expect({ bad, flag: row.usage_flag }).toEqual({ bad, flag: 'invalid' });
        expect(row.input_tokens).toBe(40);
        expect(row.output_tokens).toBeGreaterThan(0); // the estimate of the delivered reply, not 0
      }
    });

    test(`${route.name}: every hostile input count is billed (the reserved bound), flagged invalid`, async () => {
      for (const bad of HOSTILE) {
        const row = await call(route, bad, '5');
        expectSaneRow(row, 100);
        expect({ bad, flag: row.usage_flag }).toEqual({ bad, flag: 'invalid' });
        expect(row.input_tokens).toBeGreaterThan(0);
        expect(row.output_tokens).toBe(5);
      }
    });

    test(`${route.name}: output beyond max_tokens and input beyond the context window are clamped, flagged implausible`, async () => {
      const row = await call(route, '5000000', '4000000000000', 50);
      expectSaneRow(row, 50);
      expect(row).toMatchObject({ input_tokens: 200_000, output_tokens: 50, usage_flag: 'implausible' });
    });
  }

  test('anthropic json and sse: an unusable cache count is billed at the reserved input bound, never as 0', async () => {
    const antJson = (read: string, write: string) => json(`{"id":"msg_h","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"${REPLY}"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":40,"output_tokens":5,"cache_creation_input_tokens":${write},"cache_read_input_tokens":${read}}}`);
    const antSse = (read: string, write: string) => sse([
      `event: message_start\ndata: {"type":"message_start","message":{"id":"msg_h","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":40,"output_tokens":1,"cache_creation_input_tokens":${write},"cache_read_input_tokens":${read}}}}\n\n`,
      `event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n`,
      `event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"${REPLY}"}}\n\n`,
      'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
      'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}\n\n',
      'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    ]);
    for (const [stream, body] of [[false, antJson], [true, antSse]] as const) {
      for (const bad of ['1500.5', '-5', '"7"', '9007199254740993', 'true']) {
        for (const which of ['read', 'write'] as const) {
          ant.queue.push({ response: which === 'read' ? body(bad, '0') : body('0', bad) });
          const r = await send(gw, user.key, { model: 'ant', max_tokens: 100, stream, messages: [{ role: 'user', content: 'Say hello' }] });
          expect(r.status).toBe(200);
          const row = await logOf(r.headers.get('request-id')!);
          const got = which === 'read' ? row.cache_read_tokens : row.cache_write_tokens;
          expect({ stream, bad, which, billed: got > 0, flag: row.usage_flag }).toEqual({ stream, bad, which, billed: true, flag: 'invalid' });
          expect(row.input_tokens).toBe(40);
        }
      }
    }
  });

  test('cached tokens beyond prompt tokens (translated) are not billed twice', async () => {
    for (const route of ROUTES.filter((r) => r.model === 'oai')) {
      route.up().queue.push({ response: route.body('10', '5', '1000') });
      const r = await send(gw, user.key, { model: 'oai', max_tokens: 100, stream: route.stream, messages: [{ role: 'user', content: 'Say hello' }] });
      const row = await logOf(r.headers.get('request-id')!);
      expect(row.input_tokens + row.cache_read_tokens).toBe(10);
    }
  });

  // OpenAI counts reasoning inside completion_tokens (completion_tokens_details.reasoning_tokens is a part of it). Some
  // compatible servers in front of Gemini put the thinking only in reasoning_tokens (and in total_tokens): the
  // thinking the upstream billed was billed 0 (completion_tokens 5, reasoning_tokens 600: 5 output tokens).
  const reasoningCases: Array<[string, Record<string, unknown>, number]> = [
    ['reasoning_tokens above completion_tokens (cannot be a part of it)', { prompt_tokens: 10, completion_tokens: 5, completion_tokens_details: { reasoning_tokens: 600 } }, 605],
    ['total_tokens = prompt + completion + reasoning', { prompt_tokens: 10, completion_tokens: 50, total_tokens: 660, completion_tokens_details: { reasoning_tokens: 600 } }, 650],
    ['OpenAI\'s own reading: reasoning inside completion (total = prompt + completion)', { prompt_tokens: 10, completion_tokens: 650, total_tokens: 660, completion_tokens_details: { reasoning_tokens: 600 } }, 650],
    ['OpenAI\'s own reading without a total', { prompt_tokens: 10, completion_tokens: 650, completion_tokens_details: { reasoning_tokens: 600 } }, 650],
    // Conversions of Gemini's usage that drop thoughtsTokenCount altogether (any-llm and others): only total_tokens holds it.
    ['total_tokens above prompt + completion, no reasoning count', { prompt_tokens: 10, completion_tokens: 50, total_tokens: 660 }, 650],
    ['total_tokens above prompt + completion + a reasoning part inside completion', { prompt_tokens: 10, completion_tokens: 50, total_tokens: 660, completion_tokens_details: { reasoning_tokens: 20 } }, 650],
    ['total_tokens below prompt + completion (no reading of the parts): the parts as reported', { prompt_tokens: 10, completion_tokens: 50, total_tokens: 30 }, 50],
  ];
  /** A translated answer (JSON, or a stream with a usage chunk) carrying `usage` as the upstream reports it. */
  async function answeredWith(stream: boolean, usage: Record<string, unknown>) {
    const chunk = (o: object) => `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'x', ...o })}\n\n`;
    oai.queue.push(stream
      ? { rawFrames: [chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: REPLY }, finish_reason: 'stop' }] }), chunk({ choices: [], usage }), 'data: [DONE]\n\n'] }
      : { rawJson: { id: 'c', object: 'chat.completion', created: 1, model: 'x', choices: [{ index: 0, message: { role: 'assistant', content: REPLY }, finish_reason: 'stop' }], usage } });
    return send(gw, user.key, { model: 'oai', max_tokens: 1000, stream, messages: [{ role: 'user', content: 'Say hello' }] });
  }
  for (const stream of [false, true]) {
    for (const [label, usage, output] of reasoningCases) {
      test(`translated ${stream ? 'stream' : 'JSON'}: ${label}: ${output} output tokens billed and shown`, async () => {
        const r = await answeredWith(stream, usage);
        expect(r.status).toBe(200);
        const row = await logOf(r.headers.get('request-id')!);
        expect(row).toMatchObject({ input_tokens: 10, output_tokens: output, usage_flag: '', cost: 10 + output * 2 });
        // The client is shown what it is billed.
        expect(stream ? r.text : JSON.stringify(r.body.usage)).toContain(`"output_tokens":${output}`);
      });
    }
  }

  // Bedrock's Converse usage: inputTokens leaves out the cache reads and writes that totalTokens counts. Passed on as
  // prompt_tokens / cached_tokens / total_tokens, the total's gap over prompt + completion is the cache, not output:
  // billed as output, 300 cache tokens cost the output price (350 output tokens instead of 50).
  for (const stream of [false, true]) {
    test(`translated ${stream ? 'stream' : 'JSON'}: a total_tokens gap that is exactly the reported cache counts is not output`, async () => {
      const usage = { prompt_tokens: 500, completion_tokens: 50, total_tokens: 850, prompt_tokens_details: { cached_tokens: 200, cache_write_tokens: 100 } };
      const r = await answeredWith(stream, usage);
      expect(r.status).toBe(200);
      const row = await logOf(r.headers.get('request-id')!);
      expect(row).toMatchObject({ output_tokens: 50, cache_read_tokens: 200, cache_write_tokens: 100, usage_flag: '' });
      expect(stream ? r.text : JSON.stringify(r.body.usage)).toContain('"output_tokens":50');
    });
  }

  test('balance == Σ ledger after all of it', async () => {
    gw.services.relay.quota.flush();
    expect(await gw.services.ledger.sum(user.id)).toBe((await gw.services.users.byId(user.id))!.quota);
    expect(await availableOf(gw, user.id)).toBe((await gw.services.users.byId(user.id))!.quota);
  });
});
