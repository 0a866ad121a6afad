/**
 * An upstream that reports a usage of zeros for an answer it delivered (proxies and relays that fill in 0 when their
 * provider reported nothing) never gets that answer billed as free. No input of any kind (input, cache reads and writes
 * all 0: every request has a prompt) is no input count, and a usage counting nothing at all is no output count for an
 * answer with content: each is billed like a count left out (input: the reserved input bound; output: the estimate of
 * what was delivered), flagged `estimated`. A usage with an input count and 0 output is still billed as reported. Before, 10,000 characters of answer reported as `{input_tokens: 0, output_tokens: 0}` cost nothing on
 * native JSON, translated JSON and translated streams (native streams billed the input bound and 0 output). Over real
 * HTTP, native and translated channels, JSON and streams; the ledger stays Σ of the charges.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, send } from './relay-setup';

const TEXT = 'word '.repeat(2000);
const PIECES = Array.from({ length: 20 }, (_, i) => TEXT.slice(i * 500, (i + 1) * 500));
const PROMPT = 'Write about words. '.repeat(50); // 950 characters: a reserved input bound of about 480 tokens
const sse = (ev: string, data: object) => `event: ${ev}\ndata: ${JSON.stringify({ type: ev, ...data })}\n\n`;
const chunk = (c: object) => `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', model: 'x', ...c })}\n\n`;

function anthropicStream(start: object, delta: object, text = PIECES): string {
  return sse('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'x', content: [], stop_reason: null, stop_sequence: null, usage: start } })
    + sse('content_block_start', { index: 0, content_block: { type: 'text', text: '' } })
    + text.map((t) => sse('content_block_delta', { index: 0, delta: { type: 'text_delta', text: t } })).join('')
    + sse('content_block_stop', { index: 0 })
    + sse('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: delta })
    + sse('message_stop', {});
}
function openaiStream(usage: object): string {
  return chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] })
    + PIECES.map((content) => chunk({ choices: [{ index: 0, delta: { content }, finish_reason: null }] })).join('')
    + chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })
    + chunk({ choices: [], usage }) + 'data: [DONE]\n\n';
}
const anthropicJson = (usage: object) => ({ id: 'msg_1', type: 'message', role: 'assistant', model: 'x', content: [{ type: 'text', text: TEXT }], stop_reason: 'end_turn', stop_sequence: null, usage });
const openaiJson = (usage: object) => ({ id: 'c1', object: 'chat.completion', model: 'x', choices: [{ index: 0, message: { role: 'assistant', content: TEXT }, finish_reason: 'stop' }], usage });

let next: (() => Response) | null = null;
const raw = () => Bun.serve({
  port: 0, hostname: '127.0.0.1',
  async fetch(req) {
    await req.text();
    return next!();
  },
});
const sseResponse = (body: string) => new Response(body, { headers: { 'content-type': 'text/event-stream' } });

let gw: TestGateway;
const servers = [raw(), raw()];
beforeAll(async () => {
  gw = await startGateway();
  await addChannel(gw, { type: 'anthropic', url: `http://127.0.0.1:${servers[0]!.port}`, models: ['native-m'] });
  await addChannel(gw, { type: 'openai', url: `http://127.0.0.1:${servers[1]!.port}`, models: ['oai-m'] });
  for (const model of ['native-m', 'oai-m']) expect((await gw.api('PUT', '/api/pricing/', { model, input: 1_000_000, output: 1_000_000, cache_read: 1_000_000, cache_write: 1_000_000 })).status).toBe(200);
});
afterAll(async () => {
  await gw.stop();
  for (const s of servers) s.stop(true);
});

async function billed(model: string, stream: boolean, answer: () => Response) {
  const u = await keyedUser(gw, 1_000_000);
  next = answer;
  const r = await send(gw, u.key, { model, max_tokens: 3000, stream, messages: [{ role: 'user', content: PROMPT }] });
  expect(r.status).toBe(200);
  if (stream) expect(r.text).toContain('message_stop');
  gw.services.relay.quota.flush();
  const row = await gw.db.get('select input_tokens, output_tokens, cache_read_tokens, cost, usage_flag from usage_logs where request_id = ?', r.headers.get('request-id'));
  expect(await gw.services.ledger.sum(u.id)).toBe(1_000_000 - row.cost);
  return row as { input_tokens: number; output_tokens: number; cache_read_tokens: number; cost: number; usage_flag: string };
}

const ZERO = { input_tokens: 0, output_tokens: 0, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 };
const OAI_ZERO = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
const PATHS: Array<[string, string, boolean, (u: 'zero' | 'cached') => () => Response]> = [
  ['native stream', 'native-m', true, (u) => () => sseResponse(anthropicStream(u === 'zero' ? ZERO : { ...ZERO, cache_read_input_tokens: 900 }, u === 'zero' ? { output_tokens: 0 } : { output_tokens: 2600 }))],
  ['native JSON', 'native-m', false, (u) => () => Response.json(anthropicJson(u === 'zero' ? ZERO : { ...ZERO, cache_read_input_tokens: 900, output_tokens: 2600 }))],
  ['translated stream', 'oai-m', true, (u) => () => sseResponse(openaiStream(u === 'zero' ? OAI_ZERO : { prompt_tokens: 900, completion_tokens: 2600, prompt_tokens_details: { cached_tokens: 900 } }))],
  ['translated JSON', 'oai-m', false, (u) => () => Response.json(openaiJson(u === 'zero' ? OAI_ZERO : { prompt_tokens: 900, completion_tokens: 2600, prompt_tokens_details: { cached_tokens: 900 } }))],
];

describe('a usage of zeros for a delivered answer is no count', () => {
  for (const [name, model, stream, answer] of PATHS) {
    test(`${name}: billed on the estimates, flagged estimated`, async () => {
      const row = await billed(model, stream, answer('zero'));
      // The reserved input bound of the prompt (2 characters a token), never 0.
      expect(row.input_tokens).toBeGreaterThan(400);
      // 10,000 characters delivered: about 2,500 tokens at the estimate, never 0.
      expect(row.output_tokens).toBeGreaterThan(2000);
      expect(row.usage_flag).toBe('estimated');
      expect(row.cost).toBe(row.input_tokens + row.output_tokens);
    });

    test(`${name}: a prompt read whole from the cache (no uncached input) is a count, billed as reported`, async () => {
      expect(await billed(model, stream, answer('cached'))).toEqual({ input_tokens: 0, output_tokens: 2600, cache_read_tokens: 900, cost: 3500, usage_flag: '' });
    });
  }

  test('an input count with 0 output tokens is billed as reported (only a usage counting nothing is no count)', async () => {
    expect(await billed('native-m', false, () => Response.json(anthropicJson({ ...ZERO, input_tokens: 30 })))).toMatchObject({ input_tokens: 30, output_tokens: 0, usage_flag: '' });
    expect(await billed('oai-m', true, () => sseResponse(openaiStream({ prompt_tokens: 30, completion_tokens: 0 })))).toMatchObject({ input_tokens: 30, output_tokens: 0, usage_flag: '' });
  });

  test('native stream: an empty answer reporting 0 output tokens is billed 0 output', async () => {
    const row = await billed('native-m', true, () => sseResponse(anthropicStream({ input_tokens: 30, output_tokens: 0 }, { output_tokens: 0 }, [])));
    expect(row).toMatchObject({ input_tokens: 30, output_tokens: 0, usage_flag: '' });
  });
});
