import { describe, expect, test } from 'bun:test';
import { GatewayError } from '@gw/core';
import { toOpenAIRequest } from './request';
import { fromOpenAICompletion } from './response';
import { openaiUserId, reasoningEffort, requestToolNames, toolNameMap } from './openai-limits';
import type { MessagesRequest } from '../anthropic/schema';
import type { ChatCompletion } from '../openai/types';

const base = (extra: Record<string, unknown> = {}): MessagesRequest => ({ model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }], ...extra }) as MessagesRequest;
const VALID = /^[a-zA-Z0-9_-]{1,64}$/;

function code(f: () => unknown): string {
  try { f(); } catch (e) { return `${(e as GatewayError).status} ${(e as GatewayError).code} ${(e as GatewayError).param}`; }
  return 'no error';
}

describe('translated requests stay within OpenAI Chat Completions limits', () => {
  test('metadata.user_id longer than 64 becomes a stable gwu_ + 32 hex; a short one is unchanged', () => {
    const long = `user_${'a'.repeat(64)}_account__session_${'0'.repeat(36)}`; // Claude Code's shape, ~150 chars
    const out = toOpenAIRequest(base({ metadata: { user_id: long } }));
    expect(out.user).toMatch(/^gwu_[0-9a-f]{32}$/);
    expect(out.user).toBe(openaiUserId(long));
    expect(toOpenAIRequest(base({ metadata: { user_id: long } })).user).toBe(out.user!);
    expect(toOpenAIRequest(base({ metadata: { user_id: 'alice' } })).user).toBe('alice');
    expect(openaiUserId('x'.repeat(64))).toBe('x'.repeat(64));
  });

  test('tool names outside ^[a-zA-Z0-9_-]{1,64}$ are renamed everywhere in the request, valid ones kept', () => {
    const dotted = 'mcp__server__read.file';
    const long = `mcp__${'very_long_server_name_'.repeat(4)}__tool`;
    const req = base({
      tools: [{ name: dotted, input_schema: { type: 'object' } }, { name: long, input_schema: { type: 'object' } }, { name: 'Bash', input_schema: { type: 'object' } }],
      tool_choice: { type: 'tool', name: dotted },
      messages: [
        { role: 'user', content: 'go' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: dotted, input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'ok' }] },
      ],
    });
    const out = toOpenAIRequest(req);
    const names = out.tools!.map((t) => t.function.name);
    expect(names.every((n) => VALID.test(n))).toBe(true);
    expect(names[2]).toBe('Bash');
    expect(new Set(names).size).toBe(3);
    expect(out.tool_choice).toEqual({ type: 'function', function: { name: names[0]! } });
    expect((out.messages[1] as any).tool_calls[0].function.name).toBe(names[0]);
    // The answer's tool calls come back under the client's names.
    const map = toolNameMap(requestToolNames(req)).toClient;
    const completion: ChatCompletion = { id: 'c', object: 'chat.completion', created: 1, model: 'u', choices: [{ index: 0, finish_reason: 'tool_calls',
      message: { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: names[1]!, arguments: '{}' } }] } }] };
    expect(fromOpenAICompletion(completion, { requestedModel: 'm', toolNames: map }).message.content).toEqual([{ type: 'tool_use', id: 'call_1', name: long, input: {} }]);
  });

  test('renames never collide with a declared valid name', () => {
    const m = toolNameMap(['a.b', 'a_b']);
    expect(m.toUpstream['a.b']).not.toBe('a_b');
    expect(VALID.test(m.toUpstream['a.b']!)).toBe(true);
    expect(m.toUpstream['a_b']).toBeUndefined();
  });

  test('tool call ids longer than 40 are shortened stably, the same in the call and its result', () => {
    const id = `toolu_${'x'.repeat(60)}`;
    const out = toOpenAIRequest(base({ messages: [
      { role: 'user', content: 'go' },
      { role: 'assistant', content: [{ type: 'tool_use', id, name: 'f', input: {} }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: id, content: 'ok' }] },
    ] }));
    const callId = (out.messages[1] as any).tool_calls[0].id as string;
    expect(callId.length).toBeLessThanOrEqual(40);
    expect((out.messages[2] as any).tool_call_id).toBe(callId);
  });

  test('more than 128 tools or 4 stop sequences are refused with a 400 naming the field', () => {
    const tools = Array.from({ length: 129 }, (_, i) => ({ name: `t${i}`, input_schema: { type: 'object' } }));
    expect(code(() => toOpenAIRequest(base({ tools })))).toBe('400 too_many_tools tools');
    expect(toOpenAIRequest(base({ tools: tools.slice(0, 128) })).tools).toHaveLength(128);
    expect(code(() => toOpenAIRequest(base({ stop_sequences: ['a', 'b', 'c', 'd', 'e'] })))).toBe('400 too_many_stop_sequences stop_sequences');
  });
});

describe('thinking → reasoning_effort (adapter capability)', () => {
  test('budget thresholds: <4096 low, <16384 medium, else high; disabled/absent none; adaptive medium', () => {
    expect([1024, 4095, 4096, 16383, 16384, 32000].map((b) => reasoningEffort({ type: 'enabled', budget_tokens: b })))
      .toEqual(['low', 'low', 'medium', 'medium', 'high', 'high']);
    expect(reasoningEffort({ type: 'disabled' })).toBeUndefined();
    expect(reasoningEffort(undefined)).toBeUndefined();
    expect(reasoningEffort({ type: 'adaptive' })).toBe('medium');
  });
  test('sent only when the upstream takes it', () => {
    const req = base({ thinking: { type: 'enabled', budget_tokens: 20000 } });
    expect(toOpenAIRequest(req, { reasoningEffort: true }).reasoning_effort).toBe('high');
    expect(toOpenAIRequest(req).reasoning_effort).toBeUndefined();
  });
  test('reasoning (OpenRouter) or reasoning_content (DeepSeek, vLLM) on the message becomes a thinking block first', () => {
    for (const field of ['reasoning', 'reasoning_content']) {
      const c = { id: 'c', object: 'chat.completion', created: 1, model: 'u', choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'A', [field]: 'R' } }] } as unknown as ChatCompletion;
      expect(fromOpenAICompletion(c, { requestedModel: 'm' }).message.content).toEqual([{ type: 'thinking', thinking: 'R', signature: '' }, { type: 'text', text: 'A' }]);
    }
  });
});
