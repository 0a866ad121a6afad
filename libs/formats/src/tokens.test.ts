import { describe, expect, test } from 'bun:test';
import { estimateRequestTokens, estimateTextTokens, IMAGE_TOKENS } from './tokens';

describe('token estimate', () => {
  test('about 4 Latin characters per token, one per CJK character', () => {
    expect(estimateTextTokens('')).toBe(0);
    expect(estimateTextTokens('abcd')).toBe(1);
    expect(estimateTextTokens('abcde')).toBe(2);
    expect(estimateTextTokens('你好世界')).toBe(4);
  });

  test('grows with every part of the request: system, text, images, tools', () => {
    const base = { messages: [{ role: 'user' as const, content: 'hello world' }] };
    const n0 = estimateRequestTokens(base);
    const withSystem = estimateRequestTokens({ ...base, system: 'Be brief and precise.' });
    const withImage = estimateRequestTokens({ messages: [{ role: 'user', content: [{ type: 'text', text: 'hello world' }, { type: 'image', source: { type: 'url', url: 'u' } as { type: string } }] }] });
    const withTool = estimateRequestTokens({ ...base, tools: [{ name: 'get_weather', input_schema: { type: 'object' } }] });
    expect(withSystem).toBeGreaterThan(n0);
    expect(withImage - n0).toBe(IMAGE_TOKENS);
    expect(withTool).toBeGreaterThan(n0);
  });
});
