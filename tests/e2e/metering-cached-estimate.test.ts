/**
 * A usage report with cache reads but no prompt count: the prompt is billed on the gateway's estimate, and the
 * cache reads the upstream counted are a part of that prompt, so only the rest of it is uncached input. Before,
 * the whole estimate was billed at the input price and the cache reads again at the cache-read price (and shown
 * that way: input + cache reads above the prompt). Over real HTTP, translated and native, JSON and streams.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import type { TestGateway } from '../helpers/gateway';
import { bothChannelTypes, keyedUser, send, type Scripted } from './relay-setup';

const PROMPT = 'lorem ipsum dolor sit amet '.repeat(800);
const chunk = (c: object) => `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', model: 'x', ...c })}\n\n`;
const openaiFrames = (usage: object) => [
  chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: 'Done.' }, finish_reason: null }] }),
  chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }),
  chunk({ choices: [], usage }),
  'data: [DONE]\n\n',
];
const openaiJson = (usage: object) => ({ id: 'c1', object: 'chat.completion', model: 'x', choices: [{ index: 0, message: { role: 'assistant', content: 'Done.' }, finish_reason: 'stop' }], usage });
const sse = (ev: string, data: object) => `event: ${ev}\ndata: ${JSON.stringify({ type: ev, ...data })}\n\n`;
const anthropicStream = (usage: object) => sse('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'x', content: [], stop_reason: null, stop_sequence: null, usage } })
  + sse('content_block_start', { index: 0, content_block: { type: 'text', text: '' } })
  + sse('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Done.' } })
  + sse('content_block_stop', { index: 0 })
  + sse('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 5 } })
  + sse('message_stop', {});
const anthropicJson = (usage: object) => ({ id: 'msg_1', type: 'message', role: 'assistant', model: 'x', content: [{ type: 'text', text: 'Done.' }], stop_reason: 'end_turn', stop_sequence: null, usage });

let gw: TestGateway;
let oai: Scripted;
let native: Scripted;
let stop: () => Promise<void>;
beforeAll(async () => {
  // 1 unit per input token, a tenth of that per cache read, 1 per output token.
  ({ gw, oai, native, stop } = await bothChannelTypes({ input: 1_000_000, output: 1_000_000, cache_read: 100_000 }));
});
afterAll(() => stop());

interface Row { input_tokens: number; output_tokens: number; cache_read_tokens: number; cost: number; usage_flag: string }
async function billed(model: string, stream: boolean) {
  const u = await keyedUser(gw, 1_000_000);
  const r = await send(gw, u.key, { model, max_tokens: 100, stream, messages: [{ role: 'user', content: PROMPT }] });
  expect(r.status).toBe(200);
  gw.services.relay.quota.flush();
  const row = await gw.db.get('select input_tokens, output_tokens, cache_read_tokens, cost, usage_flag from usage_logs where request_id = ?', r.headers.get('request-id')) as Row;
  expect(await gw.services.ledger.sum(u.id)).toBe(1_000_000 - row.cost);
  // What the client is shown: the JSON answer's usage, or the stream's message_delta usage.
  const shown = stream
    ? JSON.parse([...r.text.matchAll(/^data: (.*)$/gm)].map((m) => m[1]!).filter((d) => d.includes('"message_delta"')).at(-1)!).usage
    : r.body.usage;
  return { row, shown };
}

describe('cache reads reported without a prompt count are a part of the estimated prompt', () => {
  test('translated JSON and stream: uncached input is the estimate less the cache reads, shown that way too', async () => {
    for (const stream of [false, true]) {
      const plan = (usage: object) => (stream ? { rawFrames: openaiFrames(usage) } : { rawJson: openaiJson(usage) });
      // The estimate of the whole prompt: what a report without any prompt count bills.
      oai.queue.push(plan({ completion_tokens: 5 }));
      const base = await billed('oai-m', stream);
      const whole = base.row.input_tokens;
      expect(whole).toBeGreaterThan(3000);
      // The client is shown the gateway's count of the prompt (the bill is on the reserved bound, at least that).
      const wholeShown = base.shown.input_tokens as number;
      expect(wholeShown).toBeGreaterThan(3000);
      oai.queue.push(plan({ completion_tokens: 5, prompt_tokens_details: { cached_tokens: 2000 } }));
      const { row, shown } = await billed('oai-m', stream);
      expect(row).toEqual({ input_tokens: whole - 2000, output_tokens: 5, cache_read_tokens: 2000, cost: whole - 2000 + 200 + 5, usage_flag: 'estimated' });
      expect(shown).toMatchObject({ input_tokens: wholeShown - 2000, cache_read_input_tokens: 2000, output_tokens: 5 });
      // Reads above the estimate (the upstream counts differently): no uncached input, the reads as counted.
      oai.queue.push(plan({ completion_tokens: 5, prompt_tokens_details: { cached_tokens: whole + 500 } }));
      const above = await billed('oai-m', stream);
      expect(above.row).toEqual({ input_tokens: 0, output_tokens: 5, cache_read_tokens: whole + 500, cost: Math.ceil((whole + 500) / 10) + 5, usage_flag: 'estimated' });
      expect(above.shown).toMatchObject({ input_tokens: 0, cache_read_input_tokens: whole + 500 });
    }
  }, 20_000);

  test('native JSON and stream: a usage without input_tokens but with cache reads bills the rest of the estimate', async () => {
    for (const stream of [false, true]) {
      const plan = (usage: object) => ({ response: () => (stream
        ? new Response(anthropicStream(usage), { headers: { 'content-type': 'text/event-stream' } })
        : Response.json(anthropicJson({ ...usage, output_tokens: 5 }))) });
      native.queue.push(plan({ output_tokens: 1 }));
      const whole = (await billed('native-m', stream)).row.input_tokens;
      expect(whole).toBeGreaterThan(3000);
      native.queue.push(plan({ output_tokens: 1, cache_read_input_tokens: 2000 }));
      const { row } = await billed('native-m', stream);
      expect(row).toEqual({ input_tokens: whole - 2000, output_tokens: 5, cache_read_tokens: 2000, cost: whole - 2000 + 200 + 5, usage_flag: 'estimated' });
    }
  }, 20_000);
});
