/**
 * The contract every adapter keeps, run against each registered adapter and the upstream double that
 * speaks its wire format, over real HTTP. A new adapter type must add its double to DOUBLES.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import type { MessagesRequest } from '@gw/formats';
import { startAnthropicUpstream } from '../../../tests/doubles/anthropic-upstream';
import { startOpenAIUpstream } from '../../../tests/doubles/openai-upstream';
import { readSse, type UpstreamDouble, type UpstreamPlan } from '../../../tests/doubles/sse';
import { adapterTypes, getAdapter } from './registry';
import { classifyTransportError } from './errors';
import { decodeContextFor } from './context';
import type { ProviderAdapter, UpstreamTarget } from './adapter';

const KEY = 'sk-upstream-secret-key-123456';
const DOUBLES: Record<string, () => UpstreamDouble> = {
  anthropic: () => startAnthropicUpstream({ apiKey: KEY }),
  openai: () => startOpenAIUpstream({ apiKey: KEY }),
  'openai-legacy': () => startOpenAIUpstream({ apiKey: KEY }),
};

const USAGE = { input: 10, output: 5, cacheRead: 3, cacheWrite: 2 };
const EXPECTED_USAGE = { input_tokens: 10, output_tokens: 5, cache_read_input_tokens: 3, cache_creation_input_tokens: 2 };
const body = (extra: Record<string, unknown> = {}) => ({ model: 'client-model', max_tokens: 100, messages: [{ role: 'user', content: 'hi there' }], ...extra }) as MessagesRequest;

test('every registered adapter has a double in this suite', () => {
  expect(adapterTypes().filter((t) => !DOUBLES[t])).toEqual([]);
});

for (const type of adapterTypes()) {
  describe(`adapter contract: ${type}`, () => {
    let up: UpstreamDouble;
    let adapter: ProviderAdapter;
    let target: UpstreamTarget;
    beforeAll(() => {
      up = DOUBLES[type]!();
      adapter = getAdapter(type);
      target = { baseUrl: up.url + '/', apiKey: KEY, upstreamModel: 'upstream-model', extraHeaders: { 'x-channel': 'c1' } };
    });
    afterAll(() => up.stop());

    async function call(b: MessagesRequest, plan: UpstreamPlan = {}) {
      up.script(() => plan);
      const { url, init } = adapter.buildMessagesRequest(b, target, new Headers());
      return fetch(url, init);
    }

    test('non-streaming: model echoed, usage exact, upstream model and channel headers sent', async () => {
      const res = await call(body(), { usage: USAGE });
      expect(res.status).toBe(200);
      const { message, usage } = adapter.decodeMessagesResponse(await res.json(), decodeContextFor(body()));
      expect(message).toMatchObject({ type: 'message', role: 'assistant', model: 'client-model', stop_reason: 'end_turn', content: [{ type: 'text', text: 'Echo: hi there' }] });
      expect(message.id).toMatch(/^msg_/);
      expect(usage).toEqual(EXPECTED_USAGE);
      const rec = up.requests.at(-1)!;
      expect(rec.body.model).toBe('upstream-model');
      expect(rec.headers['x-channel']).toBe('c1');
      expect(rec.path.startsWith('/v1/')).toBe(true);
      expect(rec.path.includes('//')).toBe(false);
    });

    test('non-streaming parallel tool calls become tool_use blocks', async () => {
      const res = await call(body(), { text: '', toolCalls: [{ id: 't1', name: 'a', input: { x: 1 } }, { id: 't2', name: 'b', input: { y: 'z' } }] });
      const { message } = adapter.decodeMessagesResponse(await res.json(), decodeContextFor(body()));
      expect(message.stop_reason).toBe('tool_use');
      expect(message.content).toEqual([{ type: 'tool_use', id: 't1', name: 'a', input: { x: 1 } }, { type: 'tool_use', id: 't2', name: 'b', input: { y: 'z' } }]);
    });

    test('streaming: Anthropic event order, requested model, text, exact usage', async () => {
      const res = await call(body({ stream: true }), { usage: USAGE });
      const decoder = adapter.createStreamDecoder(decodeContextFor(body(), { now: () => 42 }));
      const events = (await readSse(decoder.pipe(res.body!))).filter((e) => e.event !== 'ping');
      const data = events.map((e) => JSON.parse(e.data));
      expect(events.map((e) => e.event)).toEqual(data.map((d) => d.type));
      expect(events.map((e) => e.event)).toEqual([
        'message_start', 'content_block_start', ...Array(data.length - 5).fill('content_block_delta'), 'content_block_stop', 'message_delta', 'message_stop',
      ]);
      expect(data[0].message.model).toBe('client-model');
      expect(data.filter((d) => d.type === 'content_block_delta').map((d) => d.delta.text).join('')).toBe('Echo: hi there');
      expect(data.at(-2)).toMatchObject({ delta: { stop_reason: 'end_turn' }, usage: EXPECTED_USAGE });
      expect(decoder.result()).toMatchObject({ usage: EXPECTED_USAGE, stopReason: 'end_turn', complete: true, firstByteAt: 42 });
    });

    test('answerWhole: true once the end of the answer and its usage are in, never before, without the close', async () => {
      const res = await call(body({ stream: true }), { usage: USAGE });
      const events = (await res.text()).split('\n\n').filter((e) => e.trim()).map((e) => `${e}\n\n`);
      const t = adapter.createStreamDecoder(decodeContextFor(body())).transcoder;
      const whole = events.map((e) => (t.push(new TextEncoder().encode(e)), t.answerWhole));
      const first = whole.indexOf(true);
      // Anthropic: message_stop. OpenAI: the usage chunk after the finish, before [DONE].
      if (type === 'anthropic') expect(events[first]).toContain('message_stop');
      else {
        expect(events[first]).toContain('"usage"');
        expect(events[first]).not.toContain('[DONE]');
        expect(events.slice(0, first).some((e) => e.includes('"finish_reason":"stop"'))).toBe(true);
      }
      expect(whole.slice(first).every(Boolean)).toBe(true);
      expect(t.stopped).toBe(type !== 'anthropic'); // [DONE] stops a translated stream; a native one reads on to the close
    });

    test('streaming parallel tool calls: one tool_use block each, inputs intact', async () => {
      const res = await call(body({ stream: true }), { text: '', toolCalls: [{ name: 'a', input: { x: 1 } }, { name: 'b', input: { y: [1, 2] } }] });
      const decoder = adapter.createStreamDecoder(decodeContextFor(body()));
      const data = (await readSse(decoder.pipe(res.body!))).map((e) => JSON.parse(e.data));
      const starts = data.filter((d) => d.type === 'content_block_start');
      expect(starts.map((s) => [s.index, s.content_block.type, s.content_block.name])).toEqual([[0, 'tool_use', 'a'], [1, 'tool_use', 'b']]);
      const input = (i: number) => JSON.parse(data.filter((d) => d.type === 'content_block_delta' && d.index === i).map((d) => d.delta.partial_json).join(''));
      expect([input(0), input(1)]).toEqual([{ x: 1 }, { y: [1, 2] }]);
      expect(decoder.result().stopReason).toBe('tool_use');
    });

    test('a stream cut mid-way ends with an error event; usage unknown, estimate kept', async () => {
      const res = await call(body({ stream: true }), { text: 'one two three four five six', cutAfter: 4 });
      const decoder = adapter.createStreamDecoder(decodeContextFor(body()));
      const events = await readSse(decoder.pipe(res.body!));
      expect(events.at(-1)!.event).toBe('error');
      expect(JSON.parse(events.at(-1)!.data)).toMatchObject({ type: 'error', error: { type: 'api_error' } });
      expect(events.some((e) => e.event === 'message_stop')).toBe(false);
      const r = decoder.result();
      expect(r).toMatchObject({ usage: null, complete: false });
      expect(r.estimatedUsage.output_tokens).toBeGreaterThan(0);
    });

    test('events flow as they come (no buffering until the end)', async () => {
      const res = await call(body({ stream: true }), { text: 'a b c d', chunkDelayMs: 15 });
      const decoder = adapter.createStreamDecoder(decodeContextFor(body()));
      const reader = decoder.pipe(res.body!).getReader();
      const t0 = performance.now();
      await reader.read();
      const first = performance.now() - t0;
      while (!(await reader.read()).done);
      const total = performance.now() - t0;
      expect(total - first).toBeGreaterThan(60); // 6+ more frames 15 ms apart came after the first was out
    });

    test('upstream errors: 429 keeps retry-after, 5xx retryable, 400 not, bad key never echoed', async () => {
      const classify = async (plan: UpstreamPlan, b = body()) => {
        const res = await call(b, plan);
        return adapter.classifyError(res.status, await res.text(), res.headers);
      };
      const rl = await classify({ error: { status: 429, retryAfter: 7 } });
      expect([rl.retryable, rl.kind, rl.error.status, rl.error.headers['retry-after']]).toEqual([true, 'rate_limit', 429, '7']);
      const s5 = await classify({ error: { status: 500 } });
      expect([s5.retryable, s5.error.status, s5.error.type]).toEqual([true, 502, 'api_error']);
      const ov = await classify({ error: { status: 529 } });
      expect([ov.retryable, ov.error.status]).toEqual([true, 503]);
      const bad = await classify({ error: { status: 400, message: 'prompt is too long' } });
      expect([bad.retryable, bad.error.status, bad.error.type]).toEqual([false, 400, 'invalid_request_error']);
      expect(bad.error.message).toContain('prompt is too long');
      const auth = await (async () => {
        const { url, init } = adapter.buildMessagesRequest(body(), { ...target, apiKey: 'sk-wrong-key-abcdef' }, new Headers());
        const res = await fetch(url, init);
        return adapter.classifyError(res.status, await res.text(), res.headers);
      })();
      expect([auth.retryable, auth.kind, auth.error.status]).toEqual([true, 'auth', 502]);
      expect(JSON.stringify({ m: auth.error.message, p: auth.error.param })).not.toContain('sk-wrong');
    });

    test('a reset connection is a retryable transport error', async () => {
      up.script(() => ({ reset: true }));
      const { url, init } = adapter.buildMessagesRequest(body(), target, new Headers());
      const err = await fetch(url, init).then(() => null, (e) => e);
      expect(err).not.toBeNull();
      const c = classifyTransportError(err);
      expect([c.retryable, c.kind, c.error.status]).toEqual([true, 'unreachable', 502]);
    });

    test('cancelling the client stream cancels the upstream read', async () => {
      const res = await call(body({ stream: true }), { text: 'a b c d e f g h', chunkDelayMs: 30 });
      const decoder = adapter.createStreamDecoder(decodeContextFor(body()));
      const reader = decoder.pipe(res.body!).getReader();
      await reader.read();
      const before = up.cancelled;
      await reader.cancel('client went away');
      for (let i = 0; i < 50 && up.cancelled === before; i++) await Bun.sleep(5);
      expect(up.cancelled).toBe(before + 1);
      expect(decoder.result().complete).toBe(false);
    });
  });
}
