/** The doubles themselves: wire shapes, scripting, latency, errors, resets, cuts. */
import { afterAll, describe, expect, test } from 'bun:test';
import { startAnthropicUpstream } from './anthropic-upstream';
import { startOpenAIUpstream } from './openai-upstream';
import { readSse } from './sse';

const anth = startAnthropicUpstream();
const oai = startOpenAIUpstream({ apiKey: 'k' });
afterAll(async () => { await anth.stop(); await oai.stop(); });

const postA = (body: unknown, headers: Record<string, string> = {}) => fetch(anth.url + '/v1/messages', { method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', 'x-api-key': 'x', ...headers }, body: JSON.stringify(body) });
const postO = (body: unknown, key = 'k') => fetch(oai.url + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` }, body: JSON.stringify(body) });
const aBody = { model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'hello' }] };
const oBody = { model: 'm', messages: [{ role: 'user', content: 'hello' }] };

describe('anthropic double', () => {
  test('default echo reply with usage from the input length; requests recorded', async () => {
    anth.script(null);
    const j = await (await postA(aBody)).json();
    expect(j).toMatchObject({ type: 'message', model: 'm', content: [{ type: 'text', text: 'Echo: hello' }], stop_reason: 'end_turn', usage: { input_tokens: Math.ceil((JSON.stringify(aBody.messages) + '""').length / 4), output_tokens: 3 } });
    expect(anth.requests.at(-1)).toMatchObject({ method: 'POST', path: '/v1/messages', body: aBody });
  });

  test('SSE: named events whose type matches, usage in message_start and message_delta', async () => {
    anth.script(() => ({ usage: { input: 4, output: 6, cacheRead: 8 }, toolCalls: [{ name: 'f', input: { a: 1 } }] }));
    const events = await readSse(await postA({ ...aBody, stream: true }));
    expect(events.every((e) => JSON.parse(e.data).type === e.event)).toBe(true);
    expect(events.map((e) => e.event).filter((n) => n !== 'content_block_delta')).toEqual(['message_start', 'content_block_start', 'ping', 'content_block_stop', 'content_block_start', 'content_block_stop', 'message_delta', 'message_stop']);
    expect(JSON.parse(events.at(-2)!.data).usage).toEqual({ input_tokens: 4, output_tokens: 6, cache_creation_input_tokens: 0, cache_read_input_tokens: 8 });
  });

  test('errors: Anthropic error body, 429 retry-after; missing anthropic-version is a 400', async () => {
    anth.script(() => ({ error: { status: 429, retryAfter: 3 } }));
    const r = await postA(aBody);
    expect([r.status, r.headers.get('retry-after')]).toEqual([429, '3']);
    expect(await r.json()).toMatchObject({ type: 'error', error: { type: 'rate_limit_error' } });
    anth.script(null);
    expect((await fetch(anth.url + '/v1/messages', { method: 'POST', body: JSON.stringify(aBody) })).status).toBe(400);
  });

  test('count_tokens', async () => {
    anth.script(() => ({ usage: { input: 77 } }));
    const r = await fetch(anth.url + '/v1/messages/count_tokens', { method: 'POST', headers: { 'anthropic-version': '2023-06-01' }, body: JSON.stringify(aBody) });
    expect(await r.json()).toEqual({ input_tokens: 77 });
  });
});

describe('openai double', () => {
  test('auth: a wrong key gets OpenAI 401 body', async () => {
    const r = await postO(oBody, 'bad');
    expect(r.status).toBe(401);
    expect(await r.json()).toMatchObject({ error: { code: 'invalid_api_key' } });
  });

  test('JSON completion with cached usage (prompt_tokens includes cache)', async () => {
    oai.script(() => ({ usage: { input: 10, output: 2, cacheRead: 30, cacheWrite: 5 } }));
    const j = await (await postO(oBody)).json();
    expect(j).toMatchObject({ object: 'chat.completion', choices: [{ message: { content: 'Echo: hello' }, finish_reason: 'stop' }], usage: { prompt_tokens: 45, completion_tokens: 2, total_tokens: 47, prompt_tokens_details: { cached_tokens: 30, cache_write_tokens: 5 } } });
  });

  test('stream: chunks, tool-call deltas by index, usage chunk only with include_usage, then [DONE]', async () => {
    oai.script(() => ({ text: '', toolCalls: [{ name: 'a' }, { name: 'b', input: { x: 1 } }] }));
    const withUsage = await readSse(await postO({ ...oBody, stream: true, stream_options: { include_usage: true } }));
    expect(withUsage.at(-1)!.data).toBe('[DONE]');
    const usageChunk = JSON.parse(withUsage.at(-2)!.data);
    expect(usageChunk.choices).toEqual([]);
    expect(usageChunk.usage.completion_tokens).toBeGreaterThan(0);
    const indexes = withUsage.slice(0, -2).flatMap((e) => JSON.parse(e.data).choices[0].delta.tool_calls ?? []).map((t: any) => t.index);
    expect(indexes).toEqual([0, 0, 0, 1, 1, 1]);
    const without = await readSse(await postO({ ...oBody, stream: true }));
    expect(without.some((e) => e.data !== '[DONE]' && JSON.parse(e.data).choices.length === 0)).toBe(false);
  });

  test('latency before headers and between chunks', async () => {
    oai.script(() => ({ delayMs: 40, chunkDelayMs: 10, text: 'a b c' }));
    const t0 = performance.now();
    const r = await postO({ ...oBody, stream: true });
    const headersAt = performance.now() - t0;
    await r.text();
    expect(headersAt).toBeGreaterThanOrEqual(35);
    expect(performance.now() - t0 - headersAt).toBeGreaterThanOrEqual(30); // 5 frames, 10 ms apart
  });

  test('reset: no response at all; cut: some frames, then the body fails', async () => {
    oai.script(() => ({ reset: true }));
    expect(await postO(oBody).then(() => 'response', () => 'reset')).toBe('reset');
    oai.script(() => ({ cutAfter: 2, stream: true }));
    const r = await postO(oBody);
    expect(r.status).toBe(200);
    const reader = r.body!.getReader();
    let got = '';
    const err = await (async () => {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return null;
        got += new TextDecoder().decode(value);
      }
    })().catch((e) => e);
    expect(err).not.toBeNull();
    expect(got.split('\n\n').filter(Boolean).length).toBe(2);
  });
});

describe('openai double: strict profiles', () => {
  const deepseek = startOpenAIUpstream({ requireReasoningEcho: true });
  const strict = startOpenAIUpstream({ strictMessages: true });
  afterAll(async () => { await deepseek.stop(); await strict.stop(); });
  const post = (d: typeof deepseek, messages: unknown[]) => fetch(d.url + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', messages }) });
  const call = { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }] };
  const result = { role: 'tool', tool_call_id: 'c1', content: 'ok' };

  test('DeepSeek-like: tool calls sent back without reasoning_content are a 400; with it (even "") they pass', async () => {
    const r = await post(deepseek, [{ role: 'user', content: 'hi' }, call, result]);
    expect(r.status).toBe(400);
    expect(((await r.json()) as any).error.message).toContain('reasoning_content');
    expect((await post(deepseek, [{ role: 'user', content: 'hi' }, { ...call, reasoning_content: '' }, result])).status).toBe(200);
  });

  test('OpenAI-like: an unknown message field is a 400; known ones pass', async () => {
    const r = await post(strict, [{ role: 'user', content: 'hi' }, { ...call, reasoning_content: 'x' }, result]);
    expect(r.status).toBe(400);
    expect(((await r.json()) as any).error.message).toContain("'reasoning_content' was unexpected");
    expect((await post(strict, [{ role: 'system', content: 's' }, { role: 'user', content: 'hi' }, call, result])).status).toBe(200);
  });
});
