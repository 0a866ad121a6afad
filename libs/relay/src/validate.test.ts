import { describe, expect, test } from 'bun:test';
import { GatewayError } from '@gw/core';
import { validateCountTokensBody, validateMessagesBody } from './validate';

const base = { model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] };

function errorOf(body: unknown): { message: string; param?: string; code: string } {
  try {
    validateMessagesBody(body);
  } catch (e) {
    const g = e as GatewayError;
    expect(g).toBeInstanceOf(GatewayError);
    expect(g.status).toBe(400);
    return { message: g.message, param: (g as any).param, code: g.code };
  }
  throw new Error('no error');
}

describe('validation messages follow Anthropic wording (path with dots, pydantic-like text), param unchanged', () => {
  test.each([
    [{ model: 'm', messages: base.messages }, 'max_tokens: Field required', 'max_tokens', 'missing_field'],
    [{ ...base, messages: [{ role: 'user', content: 5 }] }, 'messages.0.content: Input should be a valid list', 'messages[0].content', 'invalid_value'],
    [{ ...base, temperature: 1.5 }, 'temperature: Input should be less than or equal to 1', 'temperature', 'out_of_range'],
    [{ ...base, max_tokens: 0 }, 'max_tokens: Input should be greater than or equal to 1', 'max_tokens', 'out_of_range'],
    [{ ...base, max_tokens: '5' }, 'max_tokens: Input should be a valid integer', 'max_tokens', 'invalid_type'],
    [{ ...base, max_tokens: 1.5 }, 'max_tokens: Input should be a valid integer, got a number with a fractional part', 'max_tokens', 'invalid_type'],
    [{ ...base, messages: [{ role: 'user', content: 'a' }, { role: 'bot', content: 'b' }] }, "messages.1.role: Input should be 'user' or 'assistant'", 'messages[1].role', 'invalid_value'],
    [{ ...base, messages: [{ role: 'user', content: [{ type: 'text' }] }] }, 'messages.0.content.0.text: Field required', 'messages[0].content[0].text', 'missing_field'],
    [{ ...base, messages: [] }, 'messages: List should have at least 1 item after validation, not 0', 'messages', 'out_of_range'],
    [{ ...base, tool_choice: { type: 'maybe' } }, "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'", 'tool_choice.type', 'invalid_value'],
    [{ ...base, stream: 'yes' }, 'stream: Input should be a valid boolean', 'stream', 'invalid_type'],
  ] as Array<[unknown, string, string, string]>)("%j → %s", (body, message, param, code) => {
    expect(errorOf(body)).toEqual({ message, param, code });
  });
});

describe('system turns inside messages are folded into system, in order', () => {
  test('string system + system turns (string and text blocks) become text blocks after it', () => {
    const out = validateMessagesBody({
      ...base, system: 'first',
      messages: [{ role: 'system', content: 'second' }, { role: 'user', content: 'hi' },
        { role: 'system', content: [{ type: 'text', text: 'third', cache_control: { type: 'ephemeral' } }] }],
    });
    expect(out.system).toEqual([{ type: 'text', text: 'first' }, { type: 'text', text: 'second' },
      { type: 'text', text: 'third', cache_control: { type: 'ephemeral' } }]);
    expect(out.messages).toEqual([{ role: 'user', content: 'hi' }]);
  });
  test('count_tokens folds the same way; a body without system turns is returned as is', () => {
    expect(validateCountTokensBody({ model: 'm', messages: [{ role: 'system', content: 's' }, { role: 'user', content: 'u' }] }).system)
      .toEqual([{ type: 'text', text: 's' }]);
    const plain: unknown = { ...base };
    expect(validateMessagesBody(plain) as unknown).toBe(plain);
  });
  test('a system turn that is not text stays and is reported; only system turns leave no messages', () => {
    expect(errorOf({ ...base, messages: [{ role: 'system', content: [{ type: 'image', source: { type: 'base64' } }] }, { role: 'user', content: 'x' }] }))
      .toEqual({ message: "messages.0.role: Input should be 'user' or 'assistant'", param: 'messages[0].role', code: 'invalid_value' });
    expect(errorOf({ ...base, messages: [{ role: 'system', content: 'x' }] }).message).toBe('messages: List should have at least 1 item after validation, not 0');
  });
});

describe('version header', () => {
  const h = (v: string) => new Headers({ 'vendor-version': v });
  test('valid dates pass every time (remembered), invalid ones fail every time, even after many distinct valid dates', async () => {
    const { checkVersionHeader } = await import('./validate');
    for (let i = 0; i < 3; i++) expect(checkVersionHeader(h(' 2023-06-01 '))).toBe('2023-06-01');
    for (let d = 1; d <= 28; d++) expect(checkVersionHeader(h(`2024-02-${String(d).padStart(2, '0')}`))).toHaveLength(10);
    for (let i = 0; i < 3; i++) {
      for (const bad of ['2023-02-30', '2023-13-01', 'yesterday', '2023-6-1']) {
        expect(() => checkVersionHeader(h(bad))).toThrow(expect.objectContaining({ code: 'invalid_header' }));
      }
    }
    expect(checkVersionHeader(h('2024-02-29'))).toBe('2024-02-29');
  });
});
