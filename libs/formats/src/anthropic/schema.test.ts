import { describe, expect, test } from 'bun:test';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { CountTokensRequestSchema, MessagesRequestSchema } from './schema';

const check = TypeCompiler.Compile(MessagesRequestSchema);
const ok = { model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] };
const firstError = (v: unknown) => [...check.Errors(v)][0]?.path;

describe('MessagesRequestSchema', () => {
  test('accepts the shapes real clients send, unknown fields included', () => {
    const body = {
      ...ok,
      system: [{ type: 'text', text: 's', cache_control: { type: 'ephemeral', ttl: '1h' } }],
      temperature: 1, top_p: 0, top_k: 0, stream: true, stop_sequences: ['x'],
      metadata: { user_id: null, extra: 1 },
      thinking: { type: 'enabled', budget_tokens: 1024 },
      tools: [{ name: 'f', input_schema: { type: 'object' } }, { type: 'web_search_20250305', name: 'web_search', max_uses: 2 }],
      tool_choice: { type: 'tool', name: 'f', disable_parallel_tool_use: true },
      service_tier: 'auto', output_config: { effort: 'low' },
      messages: [
        { role: 'user', content: [
          { type: 'text', text: 'a', citations: null },
          { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'x' } },
          { type: 'document', source: { type: 'url', url: 'u' } },
          { type: 'tool_result', tool_use_id: 't', content: [{ type: 'text', text: 'r' }], is_error: true },
          { type: 'search_result', source: 's', title: 't', content: [] },
        ] },
        { role: 'assistant', content: [
          { type: 'thinking', thinking: 't', signature: 's' },
          { type: 'redacted_thinking', data: 'd' },
          { type: 'tool_use', id: 't', name: 'f', input: {} },
          { type: 'server_tool_use', id: 's', name: 'web_search', input: {} },
        ] },
      ],
    };
    expect([...check.Errors(body)]).toEqual([]);
  });

  test('every object schema allows unknown fields (Elysia strips them otherwise, and a proxy must pass them on)', () => {
    const closed: string[] = [];
    const walk = (s: any, path: string) => {
      if (!s || typeof s !== 'object') return;
      if (s.type === 'object' && s.additionalProperties !== true) closed.push(path);
      for (const [k, v] of Object.entries(s)) if (typeof v === 'object') walk(v, `${path}/${k}`);
    };
    walk(MessagesRequestSchema, '');
    walk(CountTokensRequestSchema, '');
    expect(closed).toEqual([]);
  });

  test('max_tokens is a strict integer >= 1 ("5", 0 and 1.5 fail)', () => {
    expect(check.Check(ok)).toBe(true);
    for (const bad of ['5', 0, 1.5, -1, null]) expect(firstError({ ...ok, max_tokens: bad })).toBe('/max_tokens');
    expect(firstError({ model: 'm', messages: ok.messages })).toBe('/max_tokens');
  });

  test('required fields and ranges name the offending path', () => {
    expect(firstError({ ...ok, model: undefined })).toBe('/model');
    expect(firstError({ ...ok, messages: [] })).toBe('/messages');
    expect(firstError({ ...ok, messages: [{ role: 'system', content: 'x' }] })).toBe('/messages/0/role');
    expect(firstError({ ...ok, temperature: 1.5 })).toBe('/temperature');
    expect(firstError({ ...ok, top_p: -0.1 })).toBe('/top_p');
    expect(firstError({ ...ok, top_k: 1.5 })).toBe('/top_k');
    expect(firstError({ ...ok, stream: 'yes' })).toBe('/stream');
    expect(firstError({ ...ok, stop_sequences: [1] })).toBe('/stop_sequences/0');
  });

  test('a known block kind with missing fields does not slip through as an "other" block', () => {
    expect(check.Check({ ...ok, messages: [{ role: 'user', content: [{ type: 'text' }] }] })).toBe(false);
    expect(check.Check({ ...ok, messages: [{ role: 'user', content: [{ type: 'tool_use', name: 'f', input: {} }] }] })).toBe(false);
  });

  test('CountTokensRequestSchema needs no max_tokens', () => {
    expect(TypeCompiler.Compile(CountTokensRequestSchema).Check({ model: 'm', messages: ok.messages })).toBe(true);
  });
});
