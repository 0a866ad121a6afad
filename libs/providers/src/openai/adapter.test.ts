import { describe, expect, test } from 'bun:test';
import type { MessagesRequest } from '@gw/formats';
import { SseParser, estimateTextTokens } from '@gw/formats';
import { createOpenAICompatibleAdapter, openaiAdapter, openaiLegacyAdapter } from './adapter';
import { fixtureSse, streamFixtures } from '../../../../tests/fixtures/translation/load';

const target = { baseUrl: 'http://upstream.local:8000', apiKey: 'sk-o', upstreamModel: 'gpt-real', extraHeaders: {} };
const body = { model: 'alias', max_tokens: 9, messages: [{ role: 'user', content: 'hi' }], metadata: { user_id: 'u1' } } as MessagesRequest;
const enc = new TextEncoder();

/** The bytes of `text` in pieces of pseudo-random sizes (deterministic). */
function chopped(text: string, seed: number): ReadableStream<Uint8Array> {
  const bytes = enc.encode(text);
  let at = 0;
  let s = seed;
  return new ReadableStream({
    pull(c) {
      if (at >= bytes.length) return c.close();
      s = (s * 1103515245 + 12345) % 2147483648;
      const n = 1 + (s % 97);
      c.enqueue(bytes.subarray(at, at + n));
      at += n;
    },
  });
}

describe('openai adapter', () => {
  test('request: Bearer auth, chat path, translated body with the upstream model', () => {
    const { url, init } = openaiAdapter.buildMessagesRequest(body, target, new Headers({ 'anthropic-beta': 'x' }));
    expect(url).toBe('http://upstream.local:8000/v1/chat/completions');
    expect(init.headers).toEqual({ 'content-type': 'application/json', authorization: 'Bearer sk-o' });
    expect(JSON.parse(init.body)).toEqual({ model: 'gpt-real', messages: [{ role: 'user', content: 'hi' }], max_completion_tokens: 9, user: 'u1' });
  });

  test('variants are configuration: legacy uses max_tokens and has no realtime; custom auth header', () => {
    expect(JSON.parse(openaiLegacyAdapter.buildMessagesRequest(body, target, new Headers()).init.body).max_tokens).toBe(9);
    expect(openaiLegacyAdapter.realtimeUrl).toBeUndefined();
    const azureLike = createOpenAICompatibleAdapter({ type: 'x', chatPath: '/openai/v1/chat/completions', authHeaders: (k) => ({ 'api-key': k }) });
    const req = azureLike.buildMessagesRequest(body, { ...target, extraHeaders: { 'x-org': 'o' } }, new Headers());
    expect(req.url).toBe('http://upstream.local:8000/openai/v1/chat/completions');
    expect(req.init.headers).toEqual({ 'content-type': 'application/json', 'api-key': 'sk-o', 'x-org': 'o' });
  });

  test('realtime: ws(s) URL with the upstream model, Bearer header', () => {
    expect(openaiAdapter.realtimeUrl!(target)).toBe('ws://upstream.local:8000/v1/realtime?model=gpt-real');
    expect(openaiAdapter.realtimeUrl!({ ...target, baseUrl: 'https://api.openai.com/' })).toBe('wss://api.openai.com/v1/realtime?model=gpt-real');
    expect(openaiAdapter.realtimeHeaders!(target)).toEqual({ authorization: 'Bearer sk-o' });
  });

  test('no count_tokens upstream: the caller falls back to the estimate', () => {
    expect(openaiAdapter.buildCountTokensRequest).toBeUndefined();
  });

  test('a non-completion 200 body is a 502', () => {
    expect(() => openaiAdapter.decodeMessagesResponse({ object: 'list' }, { requestedModel: 'a' })).toThrow(expect.objectContaining({ status: 502 }));
  });

  describe('stream decoder reproduces every golden sequence from raw SSE bytes in any chunking', () => {
    for (const fx of streamFixtures()) {
      test(fx.name, async () => {
        for (const seed of [1, 7, 42]) {
          const d = openaiAdapter.createStreamDecoder({ requestedModel: fx.options.requestedModel, messageId: fx.options.id, inputTokens: fx.options.inputTokens, stopSequences: fx.options.stopSequences });
          const out = await new Response(d.pipe(chopped(fixtureSse(fx), seed))).text();
          const p = new SseParser();
          const events = [...p.push(out), ...p.end()];
          const expected = fx.done ? fx.expected : [...fx.expected.slice(0, -1), { type: 'error', error: { type: 'api_error', message: 'The upstream stream ended unexpectedly.' } }];
          expect(events.map((e) => JSON.parse(e.data))).toEqual(expected);
          expect(events.map((e) => e.event)).toEqual(expected.map((e) => e.type));
          const { firstByteAt: _, error: __, ...r } = d.result();
          expect(r).toEqual({ usage: fx.outcome.usage, estimatedUsage: fx.outcome.estimatedUsage, stopReason: fx.outcome.stopReason, complete: fx.outcome.complete });
        }
      });
    }
  });

  test('a mid-stream error object becomes the gateway\'s own error event: no upstream text (urls, keys) reaches the client', async () => {
    const sse = 'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}\n\n'
      + 'data: {"error":{"message":"backend http://10.0.0.5:9000/x failed for key gsk_abcdefgh123XYZ","type":"rate_limit_error"}}\n\n';
    const d = openaiAdapter.createStreamDecoder({ requestedModel: 'm', messageId: 'msg_1' });
    const out = await new Response(d.pipe(chopped(sse, 3))).text();
    const last = out.trim().split('\n\n').at(-1)!;
    expect(last).toBe('event: error\ndata: {"type":"error","error":{"type":"rate_limit_error","message":"The upstream failed mid-stream (rate_limit_error)."}}');
    expect(out).not.toContain('gsk_');
    expect(d.result().complete).toBe(false);
  });

  test('finish_reason seen but the body ends without [DONE]: the message still completes', async () => {
    const sse = 'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}\n\n';
    const d = openaiAdapter.createStreamDecoder({ requestedModel: 'm', messageId: 'msg_1' });
    const out = await new Response(d.pipe(chopped(sse, 5))).text();
    expect(out.endsWith('event: message_stop\ndata: {"type":"message_stop"}\n\n')).toBe(true);
    expect(d.result()).toMatchObject({ complete: true, usage: null, stopReason: 'end_turn' });
  });

  describe('a mid-stream error carried with choices (OpenRouter) fails the stream instead of ending it as a finished answer', () => {
    const partial = 'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
      + 'data: {"choices":[{"index":0,"delta":{"content":"The first part of the essay, and then"},"finish_reason":null}]}\n\n';
    const cases: Array<[string, string, string]> = [
      ['error object with choices and finish_reason "error"', '{"id":"gen-1","object":"chat.completion.chunk","created":1,"model":"gpt-up","provider":"x","error":{"code":"server_error","message":"Provider disconnected unexpectedly"},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}', 'api_error'],
      ['a known error type survives', '{"error":{"type":"overloaded_error","message":"x"},"choices":[{"index":0,"delta":{},"finish_reason":null}]}', 'overloaded_error'],
      ['finish_reason "error" without an error object', '{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}', 'api_error'],
    ];
    for (const [name, frame, type] of cases) {
      test(name, async () => {
        const d = openaiAdapter.createStreamDecoder({ requestedModel: 'm', messageId: 'msg_1' });
        const out = await new Response(d.pipe(chopped(`${partial}data: ${frame}\n\ndata: [DONE]\n\n`, 3))).text();
        const p = new SseParser();
        const events = [...p.push(out), ...p.end()].map((e) => JSON.parse(e.data));
        expect(events.at(-1)).toEqual({ type: 'error', error: { type, message: expect.any(String) } });
        expect(events.map((e) => e.type)).not.toContain('message_stop');
        expect(out).not.toContain('Provider disconnected');
        expect(d.result()).toMatchObject({ complete: false, stopReason: null });
      });
    }
  });

  test('a JSON answer without usage: the client gets the estimate (input from the decode context), which is returned for billing', () => {
    const json = { id: 'c', object: 'chat.completion', created: 1, model: 'u', choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'Once upon a time a fox met a crow.' } }] };
    const d = openaiAdapter.decodeMessagesResponse(json, { requestedModel: 'a', inputTokens: 23 });
    expect(d.usage).toBeNull();
    // Bun 1.4's toMatchObject writes its matchers into the object it checks: compared field by field instead.
    expect(d.message.usage.input_tokens).toBe(23);
    expect(d.message.usage.output_tokens).toBe(estimateTextTokens(JSON.stringify(d.message.content)));
    expect(d.message.usage.output_tokens).toBeGreaterThan(0);
    expect(d.estimatedUsage).toEqual(d.message.usage);
  });
});

describe('reasoning_echo', () => {
  const loop = {
    model: 'm', max_tokens: 9, messages: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: [{ type: 'thinking', thinking: 'why', signature: '' }, { type: 'tool_use', id: 't1', name: 'f', input: {} }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'ok' }] },
    ],
  } as MessagesRequest;
  const echoed = (baseUrl: string, reasoningEcho?: 'auto' | 'always' | 'never') =>
    JSON.parse(openaiAdapter.buildMessagesRequest(loop, { ...target, baseUrl, reasoningEcho }, new Headers()).init.body).messages[1].reasoning_content;

  test('auto echoes to the DeepSeek and Moonshot APIs only; always and never override it', () => {
    expect(echoed('https://api.deepseek.com')).toBe('why');
    expect(echoed('https://API.Moonshot.ai/', 'auto')).toBe('why');
    expect(echoed('https://api.moonshot.cn')).toBe('why');
    expect(echoed('https://api.openai.com')).toBeUndefined();
    expect(echoed('https://api.deepseek.com.evil.example')).toBeUndefined();
    expect(echoed('http://vllm.local:8000', 'always')).toBe('why');
    expect(echoed('https://api.deepseek.com', 'never')).toBeUndefined();
  });

  test('auto names the host, however the URL spells it: a trailing dot, a port, userinfo, a path', () => {
    // The fully qualified name is the same host (DNS resolves it alike): without the echo DeepSeek answers 400 to
    // every tool loop's second turn.
    expect(echoed('https://api.deepseek.com./v1')).toBe('why');
    expect(echoed('https://api.deepseek.com:443/v1')).toBe('why');
    // The host is what follows the userinfo; a name in the path or userinfo is not the host.
    expect(echoed('https://api.deepseek.com@api.openai.com')).toBeUndefined();
    expect(echoed('https://api.openai.com/api.deepseek.com')).toBeUndefined();
    expect(echoed('https://api.deepseek.com..')).toBeUndefined();
  });
});
