/**
 * An upstream that leaves counts out of its usage report never gets the delivered answer billed as free.
 * Over real HTTP, native and translated channels, JSON and streams: a usage object without a main count, an
 * empty one, a message_delta without usage, and an unusable streamed output all bill what an answer with no
 * usage at all bills (the estimate of what was delivered), flagged, and the ledger stays Σ of the charges.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, send } from './relay-setup';

const TEXT = 'word '.repeat(2000);
const PIECES = Array.from({ length: 20 }, (_, i) => TEXT.slice(i * 500, (i + 1) * 500));
const sse = (ev: string, data: object) => `event: ${ev}\ndata: ${JSON.stringify({ type: ev, ...data })}\n\n`;
const chunk = (c: object) => `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', model: 'x', ...c })}\n\n`;
const ABSENT = Symbol('absent');
type Report = object | typeof ABSENT;
const withUsage = (u: Report) => (u === ABSENT ? {} : { usage: u });

function anthropicStream(start: Report, delta: Report): string {
  return sse('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'x', content: [], stop_reason: null, stop_sequence: null, ...withUsage(start) } })
    + sse('content_block_start', { index: 0, content_block: { type: 'text', text: '' } })
    + PIECES.map((text) => sse('content_block_delta', { index: 0, delta: { type: 'text_delta', text } })).join('')
    + sse('content_block_stop', { index: 0 })
    + sse('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, ...withUsage(delta) })
    + sse('message_stop', {});
}
function openaiStream(u: Report): string {
  return chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] })
    + PIECES.map((content) => chunk({ choices: [{ index: 0, delta: { content }, finish_reason: null }] })).join('')
    + chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })
    + (u === ABSENT ? '' : chunk({ choices: [], ...withUsage(u) })) + 'data: [DONE]\n\n';
}
const anthropicJson = (u: Report) => ({ id: 'msg_1', type: 'message', role: 'assistant', model: 'x', content: [{ type: 'text', text: TEXT }], stop_reason: 'end_turn', stop_sequence: null, ...withUsage(u) });
const openaiJson = (u: Report) => ({ id: 'c1', object: 'chat.completion', model: 'x', choices: [{ index: 0, message: { role: 'assistant', content: TEXT }, finish_reason: 'stop' }], ...withUsage(u) });

/** What the raw upstream answers next, by channel type. */
let next: { anthropic: () => Response; openai: () => Response } | null = null;
const raw = (kind: 'anthropic' | 'openai') => Bun.serve({
  port: 0, hostname: '127.0.0.1',
  async fetch(req) {
    await req.text();
    return next![kind]();
  },
});
const sseResponse = (body: string) => new Response(body, { headers: { 'content-type': 'text/event-stream' } });

let gw: TestGateway;
const servers = [raw('anthropic'), raw('openai')];
beforeAll(async () => {
  gw = await startGateway();
  await addChannel(gw, { type: 'anthropic', url: `http://127.0.0.1:${servers[0]!.port}`, models: ['native-m'] });
  await addChannel(gw, { type: 'openai', url: `http://127.0.0.1:${servers[1]!.port}`, models: ['oai-m'] });
  for (const model of ['native-m', 'oai-m']) expect((await gw.api('PUT', '/api/pricing/', { model, input: 1_000_000, output: 1_000_000, cache_read: 0, cache_write: 0 })).status).toBe(200);
});
afterAll(async () => {
  await gw.stop();
  for (const s of servers) s.stop(true);
});

async function billed(model: string, stream: boolean, answer: () => Response) {
  const u = await keyedUser(gw, 1_000_000);
  next = { anthropic: answer, openai: answer };
  const r = await send(gw, u.key, { model, max_tokens: 3000, stream, messages: [{ role: 'user', content: 'Write.' }] });
  expect(r.status).toBe(200);
  if (stream) expect(r.text).toMatch(/message_stop|event: error/);
  gw.services.relay.quota.flush();
  const row = await gw.db.get('select input_tokens, output_tokens, cost, usage_flag from usage_logs where request_id = ?', r.headers.get('request-id'));
  expect(await gw.services.ledger.sum(u.id)).toBe(1_000_000 - row.cost);
  return row as { input_tokens: number; output_tokens: number; cost: number; usage_flag: string };
}

describe('a usage report with counts left out bills the delivered answer, never 0', () => {
  test('native stream: a message_delta without usage, or with {}, bills the output an answer without any usage bills', async () => {
    const none = await billed('native-m', true, () => sseResponse(anthropicStream(ABSENT, ABSENT)));
    expect(none).toMatchObject({ usage_flag: 'estimated' });
    expect(none.output_tokens).toBeGreaterThan(2000);
    const start = { input_tokens: 10, output_tokens: 1 };
    for (const delta of [ABSENT, {}] as Report[]) {
      const row = await billed('native-m', true, () => sseResponse(anthropicStream(start, delta)));
      expect(row).toEqual({ input_tokens: 10, output_tokens: none.output_tokens, cost: 10 + none.output_tokens, usage_flag: 'estimated' });
    }
    // An unusable streamed output count is replaced by what was delivered, not by max_tokens (3000).
    for (const output_tokens of [-5, '2003', 1e300]) {
      const row = await billed('native-m', true, () => sseResponse(anthropicStream(start, { output_tokens })));
      expect(row).toEqual({ input_tokens: 10, output_tokens: none.output_tokens, cost: 10 + none.output_tokens, usage_flag: 'invalid' });
    }
  }, 20_000);

  test('native stream cut before its message_delta: an unusable or missing start input bills the reserved input, never 0', async () => {
    const cut = (start: Report) => () => sseResponse(anthropicStream(start, ABSENT).split('event: message_delta')[0]!);
    const missing = await billed('native-m', true, cut(ABSENT));
    expect(missing.input_tokens).toBeGreaterThan(0);
    expect(missing.usage_flag).toBe('estimated');
    for (const input_tokens of [null, '10', -5, 1.5]) {
      const row = await billed('native-m', true, cut({ input_tokens, output_tokens: 1 }));
      expect(row).toMatchObject({ input_tokens: missing.input_tokens, output_tokens: missing.output_tokens, usage_flag: 'estimated,invalid' });
    }
  }, 20_000);

  test('native JSON: usage {} or without output_tokens bills the estimate, flagged estimated', async () => {
    const none = await billed('native-m', false, () => Response.json(anthropicJson(ABSENT)));
    expect(none.output_tokens).toBeGreaterThan(2000);
    expect(await billed('native-m', false, () => Response.json(anthropicJson({})))).toEqual(none);
    expect(await billed('native-m', false, () => Response.json(anthropicJson({ input_tokens: 10 }))))
      .toEqual({ input_tokens: 10, output_tokens: none.output_tokens, cost: 10 + none.output_tokens, usage_flag: 'estimated' });
  }, 20_000);

  test('translated JSON and stream: usage {} or without completion_tokens bills the estimate, flagged estimated', async () => {
    for (const stream of [false, true]) {
      const answer = (u: Report) => () => (stream ? sseResponse(openaiStream(u)) : Response.json(openaiJson(u)));
      const none = await billed('oai-m', stream, answer(ABSENT));
      expect(none).toMatchObject({ usage_flag: 'estimated' });
      expect(none.output_tokens).toBeGreaterThan(2000);
      expect(await billed('oai-m', stream, answer({}))).toMatchObject({ output_tokens: none.output_tokens, usage_flag: 'estimated' });
      expect((await billed('oai-m', stream, answer({}))).cost).toBeGreaterThan(2000);
      expect(await billed('oai-m', stream, answer({ prompt_tokens: 10 })))
        .toEqual({ input_tokens: 10, output_tokens: none.output_tokens, cost: 10 + none.output_tokens, usage_flag: 'estimated' });
    }
  }, 20_000);
});

describe('translated streams: a count reported in one usage chunk is not lost by a later chunk without it', () => {
  // Some compatible servers (and converters in front of Anthropic) report prompt_tokens early and completion_tokens at
  // the end, each chunk carrying only its own count. The last report replaced the whole usage: prompt_tokens 5,000
  // (and its cached part) were billed at the request's estimate, a dozen tokens.
  const split = (first: object, last: object) => () => sseResponse(
    chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }], usage: first })
    + PIECES.map((content) => chunk({ choices: [{ index: 0, delta: { content }, finish_reason: null }] })).join('')
    + chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })
    + chunk({ choices: [], usage: last }) + 'data: [DONE]\n\n');

  test('prompt_tokens early, completion_tokens last: both billed as reported', async () => {
    expect(await billed('oai-m', true, split({ prompt_tokens: 5000 }, { completion_tokens: 800 })))
      .toEqual({ input_tokens: 5000, output_tokens: 800, cost: 5800, usage_flag: '' });
  }, 20_000);

  test('completion_tokens early, prompt_tokens last: both billed as reported, the output streamed after the count on top', async () => {
    // The early completion_tokens cannot cover the 10,000 characters streamed after it (it was billed as the whole
    // answer's output): they are added at the estimate of what was delivered, as on native streams.
    const none = await billed('oai-m', true, () => sseResponse(openaiStream(ABSENT)));
    const output = 400 + none.output_tokens;
    expect(await billed('oai-m', true, split({ completion_tokens: 400 }, { prompt_tokens: 5000 })))
      .toEqual({ input_tokens: 5000, output_tokens: output, cost: 5000 + output, usage_flag: '' });
  }, 20_000);

  test('a later count still replaces an earlier one (running totals: the last report wins)', async () => {
    expect(await billed('oai-m', true, split({ prompt_tokens: 5000, completion_tokens: 1 }, { prompt_tokens: 5000, completion_tokens: 800 })))
      .toEqual({ input_tokens: 5000, output_tokens: 800, cost: 5800, usage_flag: '' });
  }, 20_000);
});

// Proxies and relays fill in 0 where their provider reported nothing. No input of any kind (input, cache reads and
// writes all 0: every request has a prompt) is no input count, and a usage counting nothing at all is no output count
// for an answer with content: each is billed like a count left out, flagged `estimated`. Before, 10,000 characters
// of answer reported as `{input_tokens: 0, output_tokens: 0}` cost nothing on native JSON, translated JSON and
// translated streams (native streams billed the input bound and 0 output).
describe('a usage of zeros for a delivered answer is no count', () => {
  const ZERO = { input_tokens: 0, output_tokens: 0, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 };
  const CACHED = { ...ZERO, cache_read_input_tokens: 900, output_tokens: 2600 };
  const OAI_CACHED = { prompt_tokens: 900, completion_tokens: 2600, prompt_tokens_details: { cached_tokens: 900 } };
  const paths: Array<[string, string, boolean, (u: 'zero' | 'cached') => () => Response]> = [
    ['native stream', 'native-m', true, (u) => () => sseResponse(anthropicStream(u === 'zero' ? ZERO : { ...CACHED, output_tokens: 1 }, { output_tokens: u === 'zero' ? 0 : 2600 }))],
    ['native JSON', 'native-m', false, (u) => () => Response.json(anthropicJson(u === 'zero' ? ZERO : CACHED))],
    ['translated stream', 'oai-m', true, (u) => () => sseResponse(openaiStream(u === 'zero' ? { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 } : OAI_CACHED))],
    ['translated JSON', 'oai-m', false, (u) => () => Response.json(openaiJson(u === 'zero' ? { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 } : OAI_CACHED))],
  ];
  for (const [name, model, stream, answer] of paths) {
    test(`${name}: billed on the estimates, flagged estimated`, async () => {
      const row = await billed(model, stream, answer('zero'));
      // The reserved input bound of the prompt, never 0; 10,000 characters delivered: about 2,500 tokens, never 0.
      expect(row.input_tokens).toBeGreaterThan(0);
      expect(row.output_tokens).toBeGreaterThan(2000);
      expect(row).toMatchObject({ usage_flag: 'estimated', cost: row.input_tokens + row.output_tokens });
    }, 20_000);

    test(`${name}: a prompt read whole from the cache (no uncached input) is a count, billed as reported`, async () => {
      // Cache reads are priced 0 here: the cost is the output.
      expect(await billed(model, stream, answer('cached'))).toEqual({ input_tokens: 0, output_tokens: 2600, cost: 2600, usage_flag: '' });
    }, 20_000);
  }

  test('an input count with 0 output tokens is billed as reported (only a usage counting nothing is no count)', async () => {
    expect(await billed('native-m', false, () => Response.json(anthropicJson({ ...ZERO, input_tokens: 30 })))).toMatchObject({ input_tokens: 30, output_tokens: 0, usage_flag: '' });
    expect(await billed('oai-m', true, () => sseResponse(openaiStream({ prompt_tokens: 30, completion_tokens: 0 })))).toMatchObject({ input_tokens: 30, output_tokens: 0, usage_flag: '' });
  }, 20_000);
});
