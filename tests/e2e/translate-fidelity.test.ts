/**
 * Anthropic ⇄ OpenAI translation over real HTTP through a gateway, against the OpenAI upstream double: what the
 * upstream receives for a document's title and context and for an assistant prefill, and when a streamed tool
 * call that reuses another's index reaches the client.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { SseParser } from '@gw/formats';
import { startGateway, type TestGateway } from '../helpers/gateway';
import type { UpstreamPlan } from '../doubles/sse';
import { addChannel, keyedUser, send, setPrice, upstream, V, type Scripted } from './relay-setup';

type UpstreamError = NonNullable<UpstreamPlan['error']>;

let gw: TestGateway;
let oai: Scripted;
let key: string;
beforeAll(async () => {
  gw = await startGateway();
  oai = upstream('openai');
  await addChannel(gw, { type: 'openai', url: oai.url, models: ['gpt-t'] });
  await setPrice(gw, 'gpt-t');
  key = (await keyedUser(gw, 10_000_000)).key;
}, 30_000);
afterAll(async () => { await oai.stop(); await gw.stop(); });

const chunk = (delta: unknown, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const usageChunk = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 10, completion_tokens: 5 } })}\n\n`;
const DONE = 'data: [DONE]\n\n';
type Ev = { type: string; [k: string]: any };

describe('document title and context', () => {
  test('reach the upstream as text before the document, so the model reads them', async () => {
    const r = await send(gw, key, { model: 'gpt-t', max_tokens: 50, messages: [{ role: 'user', content: [
      { type: 'document', title: 'Q3 report', context: 'Figures are unaudited', source: { type: 'text', media_type: 'text/plain', data: 'Revenue rose 4%.' } },
      { type: 'document', title: 'spec.pdf', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0x' } },
      { type: 'text', text: 'Summarise both.' },
    ] }] });
    expect(r.status).toBe(200);
    expect(oai.last().body.messages).toEqual([{ role: 'user', content: [
      { type: 'text', text: 'Document title: Q3 report\nDocument context: Figures are unaudited\n\nRevenue rose 4%.' },
      { type: 'text', text: 'Document title: spec.pdf' },
      { type: 'file', file: { filename: 'spec.pdf', file_data: 'data:application/pdf;base64,JVBERi0x' } },
      { type: 'text', text: 'Summarise both.' },
    ] }]);
  });
});

describe('assistant prefill (the last message is an assistant turn)', () => {
  // The upstream gets the prefill as the last message, as sent, so servers that continue a trailing assistant
  // message (OpenRouter, Ollama, llama.cpp) continue it; the client gets what the upstream generated and nothing
  // else, as Anthropic answers only the continuation: the prefill is neither sent back nor cut from the answer.
  const body = (stream: boolean, prefill: unknown) => ({ model: 'gpt-t', max_tokens: 50, stream, messages: [
    { role: 'user', content: 'Give me JSON for a=1' }, { role: 'assistant', content: prefill },
  ] });
  for (const stream of [false, true]) {
    test(`${stream ? 'stream' : 'JSON'}: the upstream continues the prefill; the answer is the continuation only`, async () => {
      for (const prefill of ['{"a":', [{ type: 'text', text: '{"a"' }, { type: 'text', text: ':' }]]) {
        oai.queue.push({ text: ' 1}' });
        const r = await send(gw, key, body(stream, prefill));
        expect(r.status).toBe(200);
        const msgs = oai.last().body.messages;
        expect(msgs.at(-1)).toEqual({ role: 'assistant', content: '{"a":' });
        expect(msgs.length).toBe(2);
        const text = stream
          ? new SseParser().push(r.text).map((e) => JSON.parse(e.data)).filter((e) => e.delta?.type === 'text_delta').map((e) => e.delta.text).join('')
          : r.body.content.map((b: { text: string }) => b.text).join('');
        expect(text).toBe(' 1}');
      }
    });
  }
});

/**
 * Two channels of `model`: the preferred one answers `capError` four times, the other serves each request, and the
 * refusing channel stays enabled (3 faults would disable it); then both refuse, and the client gets Anthropic's
 * answer to a max_tokens above the model's cap, `message`, streamed or not. Returns the refusing upstream.
 */
async function failsOverOnCap(kind: 'openai' | 'anthropic', model: string, capError: UpstreamError, maxTokens: number, message: string): Promise<Scripted> {
  const capped = upstream(kind);
  const roomy = upstream(kind);
  try {
    await setPrice(gw, model);
    const cappedId = await addChannel(gw, { type: kind, url: capped.url, models: [model], priority: 2, name: `${model}-capped` });
    await addChannel(gw, { type: kind, url: roomy.url, models: [model], priority: 1, name: `${model}-roomy` });
    for (let i = 0; i < 4; i++) {
      capped.queue.push({ error: capError });
      roomy.queue.push({ text: 'long answer' });
      const r = await send(gw, key, { model, max_tokens: maxTokens, messages: [{ role: 'user', content: 'Hi' }] });
      expect(r.status).toBe(200);
      expect(r.body.content).toEqual([{ type: 'text', text: 'long answer' }]);
    }
    expect([capped.hits, roomy.hits]).toEqual([4, 4]);
    expect(gw.services.channelRegistry.get(cappedId)!.status).toBe(1);
    for (const stream of [false, true]) {
      capped.queue.push({ error: capError });
      roomy.queue.push({ error: capError });
      const r = await send(gw, key, { model, max_tokens: maxTokens, stream, messages: [{ role: 'user', content: 'Hi' }] });
      expect(r.status).toBe(400);
      expect(r.body.error).toMatchObject({ type: 'invalid_request_error', code: 'max_tokens_too_large', param: 'max_tokens', message });
      expect(JSON.stringify(r.body)).not.toContain('internal-name');
    }
    return capped;
  } finally {
    await capped.stop();
    await roomy.stop();
  }
}

describe("max_tokens above the output cap of a channel's upstream model", () => {
  // OpenAI's own 400 (max_completion_tokens is sent; the message names max_tokens). A cap known beforehand is a
  // channel override (`clamp` of max_tokens: tests/e2e/channel-overrides.test.ts); one the upstream states is judged here.
  test('another channel serving the model takes the request; the capped channel keeps its health', async () => {
    const capError = { status: 400, message: 'max_tokens is too large: 64000. This model supports at most 16384 completion tokens, whereas you provided 64000.' };
    const capped = await failsOverOnCap('openai', 'gpt-cap', capError, 64000, 'max_tokens: 64000 > 16384, which is the maximum allowed number of output tokens for this model');
    expect(capped.last().body.max_completion_tokens).toBe(64000);
  });
  test("DeepSeek's wording (the cap without the asked value, its error body as it sends it) fails over the same way, naming the max_tokens sent", async () => {
    const capError = { status: 400, message: 'Invalid max_tokens value, the valid range of max_tokens is [1, 8192]', type: 'invalid_request_error', code: 'invalid_request_error' };
    const capped = await failsOverOnCap('openai', 'ds-cap', capError, 32000, 'max_tokens: 32000 > 8192, which is the maximum allowed number of output tokens for this model');
    expect(capped.last().body.max_completion_tokens).toBe(32000);
  });
});

describe("max_tokens above the output cap on native channels (Anthropic's own words)", () => {
  // With the header Anthropic's SDKs read on every error ("false" on a 400): about retrying that upstream, not this model's
  // others. With none left the answer leaves out the upstream model name.
  test('another native channel serving the model takes it', async () => {
    const capError = { status: 400, message: 'max_tokens: 64000 > 32000, which is the maximum allowed number of output tokens for claude-upstream-internal-name', headers: { 'x-should-retry': 'false' } };
    await failsOverOnCap('anthropic', 'claude-cap', capError, 64000, 'max_tokens: 64000 > 32000, which is the maximum allowed number of output tokens for this model');
  });
});

describe('a streamed tool call that reuses the index of the live one (Ollama numbers every call 0)', () => {
  test('reaches the client as its own block when it starts, not when the answer ends', async () => {
    const call = (tc: object) => chunk({ tool_calls: [{ index: 0, ...tc }] });
    oai.queue.push({
      rawFrames: [
        call({ id: 'call_a', type: 'function', function: { name: 'get', arguments: '{"a":1}' } }),
        call({ id: 'call_b', type: 'function', function: { name: 'put', arguments: '{"b":' } }),
        call({ function: { arguments: '2}' } }),
        chunk({}, 'tool_calls'), usageChunk, DONE,
      ],
      // The upstream thinks for 1.5 s after the second call's arguments: its block must be out by then.
      pause: { afterFrames: 3, ms: 1500 },
    });
    const t0 = performance.now();
    const res = await fetch(`${gw.url}/v1/messages`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key, ...V },
      body: JSON.stringify({ model: 'gpt-t', max_tokens: 50, stream: true, tools: [{ name: 'get', input_schema: { type: 'object' } }, { name: 'put', input_schema: { type: 'object' } }], messages: [{ role: 'user', content: 'Hi' }] }),
    });
    expect(res.status).toBe(200);
    const parser = new SseParser();
    const events: Array<Ev & { at: number }> = [];
    for await (const bytes of res.body!) for (const e of parser.push(bytes)) events.push({ ...JSON.parse(e.data), at: performance.now() - t0 });
    const startB = events.find((e) => e.type === 'content_block_start' && e.content_block.id === 'call_b')!;
    const end = events.find((e) => e.type === 'message_delta')!;
    expect(startB.index).toBe(1);
    expect(end.at - startB.at).toBeGreaterThan(1000); // sent before the pause, not with the end of the answer
    const blocks = events.filter((e) => e.type.startsWith('content_block')).map((e) => [e.type, e.index]);
    expect(blocks.map(([t]) => t)).toEqual(['content_block_start', 'content_block_delta', 'content_block_stop', 'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_stop']);
    expect(blocks.map(([, i]) => i)).toEqual([0, 0, 0, 1, 1, 1, 1]);
    const args = (i: number) => JSON.parse(events.filter((e) => e.type === 'content_block_delta' && e.index === i).map((e) => e.delta.partial_json).join(''));
    expect([args(0), args(1)]).toEqual([{ a: 1 }, { b: 2 }]);
    expect(end.delta.stop_reason).toBe('tool_use');
  }, 15_000);
});
