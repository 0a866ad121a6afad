import { describe, expect, test } from 'bun:test';
import { estimateRequestTokens, estimateTextTokens, IMAGE_MAX_BASE64_CHARS, IMAGE_MAX_TOKENS, IMAGE_TOKENS, measureRequestTokens } from './tokens';

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

describe('measureRequestTokens (reservation bound)', () => {
  const text = (content: unknown) => ({ messages: [{ role: 'user' as const, content: content as any }] });
  test('text: the bound is at least the estimate and at least 1 token per 2 characters', () => {
    const m = measureRequestTokens(text('x'.repeat(10_000)));
    expect(m.unmeasured).toBe(false);
    expect(m.bound).toBeGreaterThanOrEqual(5000);
    expect(m.bound).toBeGreaterThanOrEqual(m.estimate);
    expect(m.estimate).toBe(estimateRequestTokens(text('x'.repeat(10_000))));
  });
  test('text beyond ASCII: half a token per UTF-8 byte (wide CJK characters 1 each)', () => {
    const bound = (s: string) => measureRequestTokens(text(s)).bound - measureRequestTokens(text('')).bound;
    expect(bound('x'.repeat(1000))).toBe(500);
    // Before: counted in UTF-16 units, 500 (Cyrillic, Thai) and 1,000 (emoji) for what byte-level tokenizers may read
    // as 1,000 to 3,000 tokens.
    expect(bound('д'.repeat(1000))).toBe(1000);
    expect(bound('ก'.repeat(1000))).toBe(1500);
    expect(bound('😀'.repeat(1000))).toBe(2000);
    expect(bound('你'.repeat(1000))).toBe(1000);
    expect(bound('你x'.repeat(1000))).toBe(1500);
  });
  test('unmeasurable inputs: URL and file sources, base64 PDFs, large base64 images, server tools, MCP', () => {
    const doc = (source: unknown, type = 'document') => text([{ type, source }]);
    for (const req of [
      doc({ type: 'url', url: 'https://x/a.pdf' }), doc({ type: 'file', file_id: 'f' }),
      doc({ type: 'base64', media_type: 'application/pdf', data: 'JVBER' }),
      doc({ type: 'url', url: 'https://x/a.png' }, 'image'), doc({ type: 'base64', media_type: 'image/png', data: 'A'.repeat(IMAGE_MAX_BASE64_CHARS + 1) }, 'image'),
      { ...text('hi'), tools: [{ name: 'web_search', type: 'web_search_20250305' }] },
      { ...text('hi'), mcp_servers: [{ type: 'url', url: 'https://mcp' }] },
      // Nested inside a tool result, too.
      text([{ type: 'tool_result', tool_use_id: 't', content: [{ type: 'document', source: { type: 'url', url: 'https://x' } }] }]),
    ]) expect(measureRequestTokens(req as any).unmeasured).toBe(true);
  });
  test('a small base64 image is bounded, not unmeasured; text documents count as text', () => {
    const img = measureRequestTokens(text([{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }]));
    expect(img).toMatchObject({ unmeasured: false });
    expect(img.bound).toBeGreaterThanOrEqual(IMAGE_MAX_TOKENS);
    const d = measureRequestTokens(text([{ type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'y'.repeat(4000) } }]));
    expect(d.unmeasured).toBe(false);
    expect(d.bound).toBeGreaterThanOrEqual(2000);
    // A document's title and context are text the model reads (sent as text to OpenAI upstreams): counted as text.
    for (const field of ['title', 'context']) {
      const h = measureRequestTokens(text([{ type: 'document', [field]: 'z'.repeat(8000), source: { type: 'text', media_type: 'text/plain', data: 'y' } }]));
      expect(h.bound).toBeGreaterThanOrEqual(4000);
      expect(h.estimate).toBeGreaterThanOrEqual(2000);
    }
  });
});
