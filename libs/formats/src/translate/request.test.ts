import { describe, expect, test } from 'bun:test';
import { GatewayError } from '@gw/core';
import { toOpenAIRequest } from './request';
import type { MessagesRequest } from '../anthropic/schema';
import fixture from '../../../../tests/fixtures/translation/request-full.json';

// Bodies as the validator lets them through (extra fields allowed), hence the loose parameter type.
const base = (extra: Record<string, unknown> = {}): MessagesRequest => ({ model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }], ...extra }) as MessagesRequest;

function rejects(req: MessagesRequest, code: string, param: string) {
  try {
    toOpenAIRequest(req);
  } catch (e) {
    expect(e).toBeInstanceOf(GatewayError);
    expect({ status: (e as GatewayError).status, code: (e as GatewayError).code, param: (e as GatewayError).param }).toEqual({ status: 400, code, param });
    return;
  }
  throw new Error('expected a GatewayError');
}

describe('toOpenAIRequest', () => {
  test('golden: request-full.json', () => {
    const input = structuredClone(fixture.anthropic) as unknown as MessagesRequest;
    expect(toOpenAIRequest(input, { model: 'gpt-upstream' })).toEqual(fixture.openai as any);
    expect(input).toEqual(fixture.anthropic as any); // the client's body is not mutated
  });

  test('minimal request: string content, no optional fields', () => {
    expect(toOpenAIRequest(base())).toEqual({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_completion_tokens: 10 });
  });

  test('options: max_tokens field, safety_identifier, developer role', () => {
    const out = toOpenAIRequest(base({ system: 'S', metadata: { user_id: 'u' } }), { maxTokensField: 'max_tokens', userField: 'safety_identifier', systemRole: 'developer' });
    expect(out).toEqual({ model: 'm', messages: [{ role: 'developer', content: 'S' }, { role: 'user', content: 'hi' }], max_tokens: 10, safety_identifier: 'u' });
  });

  test('tool_choice auto / none / tool (only sent with tools)', () => {
    expect(toOpenAIRequest(base({ tool_choice: { type: 'any' } })).tool_choice).toBeUndefined();
    const tools = [{ name: 'f', input_schema: { type: 'object' } }];
    expect(toOpenAIRequest(base({ tools, tool_choice: { type: 'auto' } })).tool_choice).toBe('auto');
    expect(toOpenAIRequest(base({ tools, tool_choice: { type: 'none', disable_parallel_tool_use: true } }))).toMatchObject({ tool_choice: 'none' });
    expect(toOpenAIRequest(base({ tools, tool_choice: { type: 'none', disable_parallel_tool_use: true } })).parallel_tool_calls).toBeUndefined();
    expect(toOpenAIRequest(base({ tools, tool_choice: { type: 'tool', name: 'f' } })).tool_choice).toEqual({ type: 'function', function: { name: 'f' } });
  });

  test('assistant turn with only tool calls has content null; only-tool-result user turn has no empty user message', () => {
    const out = toOpenAIRequest(base({
      messages: [
        { role: 'user', content: 'q' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'f', input: { a: 1 } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1' }] },
      ],
    }));
    expect(out.messages.slice(1)).toEqual([
      { role: 'assistant', content: null, tool_calls: [{ id: 't1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }] },
      { role: 'tool', tool_call_id: 't1', content: '' },
    ]);
  });

  test('more than 4 stop_sequences is a 400 on stop_sequences', () => {
    rejects(base({ stop_sequences: ['a', 'b', 'c', 'd', 'e'] }), 'too_many_stop_sequences', 'stop_sequences');
    expect(toOpenAIRequest(base({ stop_sequences: ['a', 'b', 'c', 'd'] })).stop).toEqual(['a', 'b', 'c', 'd']);
  });

  test('server tools are rejected with unsupported_tool and their index', () => {
    rejects(base({ tools: [{ name: 'f', input_schema: { type: 'object' } }, { type: 'web_search_20250305', name: 'web_search' }] }), 'unsupported_tool', 'tools[1]');
  });

  test('content that has no OpenAI form is rejected with its path', () => {
    rejects(base({ messages: [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'image', source: { type: 'file', file_id: 'f1' } }] }] }), 'unsupported_content', 'messages[0].content[1].source');
    rejects(base({ messages: [{ role: 'user', content: [{ type: 'search_result', source: 's' }] }] }), 'unsupported_content', 'messages[0].content[0]');
  });
});

describe('toOpenAIRequest: reasoningEcho', () => {
  const call = { type: 'tool_use', id: 'toolu_1', name: 'f', input: {} };
  const assistant = (...content: object[]) => base({ messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content }] });
  const sent = (req: MessagesRequest, reasoningEcho: boolean) => toOpenAIRequest(req, { reasoningEcho }).messages[1] as Record<string, unknown>;

  test("unsigned thinking (a translated upstream's) is joined into reasoning_content; off, nothing is sent", () => {
    const req = assistant({ type: 'thinking', thinking: 'a', signature: '' }, { type: 'thinking', thinking: 'b' }, { type: 'text', text: 'x' }, call);
    expect(sent(req, true).reasoning_content).toBe('a\nb');
    expect(sent(req, false)).not.toHaveProperty('reasoning_content');
  });

  test('signed thinking and redacted_thinking are never echoed; tool calls without echoable thinking get ""', () => {
    const req = assistant({ type: 'thinking', thinking: 'claude', signature: 'sig' }, { type: 'redacted_thinking', data: 'enc' }, call);
    expect(sent(req, true).reasoning_content).toBe('');
    expect(sent(assistant(call), true).reasoning_content).toBe('');
  });

  test('a text-only answer without thinking carries no reasoning_content', () => {
    expect(sent(assistant({ type: 'text', text: 'x' }), true)).not.toHaveProperty('reasoning_content');
    expect(sent(assistant({ type: 'thinking', thinking: 'hm', signature: 'sig' }, { type: 'text', text: 'x' }), true)).not.toHaveProperty('reasoning_content');
  });
});

describe('toOpenAIRequest: document title and context', () => {
  const doc = (source: object, extra: object = {}) => base({ messages: [{ role: 'user', content: [{ type: 'document', source, ...extra }, { type: 'text', text: 'Summarise.' }] }] });
  const parts = (req: MessagesRequest) => toOpenAIRequest(req).messages[0]!.content;

  test('a text document carries its title and context before its text', () => {
    expect(parts(doc({ type: 'text', media_type: 'text/plain', data: 'The body.' }, { title: 'Q3 report', context: 'Written by finance' }))).toEqual([
      { type: 'text', text: 'Document title: Q3 report\nDocument context: Written by finance\n\nThe body.' },
      { type: 'text', text: 'Summarise.' },
    ]);
  });

  test('a content document and a PDF get a text part naming them first; only the fields given', () => {
    expect(parts(doc({ type: 'content', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }, { context: 'ctx' }))).toEqual([
      { type: 'text', text: 'Document context: ctx' }, { type: 'text', text: 'a' }, { type: 'text', text: 'b' }, { type: 'text', text: 'Summarise.' },
    ]);
    expect(parts(doc({ type: 'base64', media_type: 'application/pdf', data: 'JVBE' }, { title: 'spec.pdf', context: 'v2' }))).toEqual([
      { type: 'text', text: 'Document title: spec.pdf\nDocument context: v2' },
      { type: 'file', file: { filename: 'spec.pdf', file_data: 'data:application/pdf;base64,JVBE' } },
      { type: 'text', text: 'Summarise.' },
    ]);
  });

  test('without title or context (or with them empty or not strings) the document is as before', () => {
    expect(parts(doc({ type: 'text', data: 'x' }, { title: '', context: null }))).toEqual([{ type: 'text', text: 'x' }, { type: 'text', text: 'Summarise.' }]);
    expect(parts(doc({ type: 'content', content: 'y' }, { context: 5 }))).toEqual([{ type: 'text', text: 'y' }, { type: 'text', text: 'Summarise.' }]);
  });
});
