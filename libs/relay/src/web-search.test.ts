import { expect, test } from 'bun:test';
import { capWebSearch, webSearchBound } from './web-search';

const WS = { type: 'web_search_20250305', name: 'web_search' };

test('max_uses: kept from 1 to the cap, else set to the cap; other tools untouched; no copy when nothing changes', () => {
  const tools = [
    { ...WS, max_uses: 3 }, { ...WS, max_uses: 50 }, WS,
    { type: 'web_search_20260101', name: 'web_search', max_uses: 11 },
    // Spellings an Anthropic-compatible upstream might accept are web searches too.
    { type: 'Web_Search_20250305', name: 'web_search', max_uses: 40 }, { type: ' web_search', name: 'web_search' },
    { type: 'web_fetch_20250910', name: 'web_fetch', max_uses: 99 }, { name: 'lookup', input_schema: { type: 'object' } },
  ];
  const body = { tools } as any;
  const capped = capWebSearch(body, 10);
  expect(capped.tools!.map((t: any) => t.max_uses)).toEqual([3, 10, 10, 10, 10, 10, 99, undefined]);
  expect(body.tools[1].max_uses).toBe(50); // the client's body is not changed
  expect(webSearchBound(capped, 10)).toBe(3 + 10 * 5);
  expect(webSearchBound(body, 10)).toBe(3 + 10 * 5);
  const fine = { tools: [{ ...WS, max_uses: 4 }, { name: 'x' }] } as any;
  expect(capWebSearch(fine, 10)).toBe(fine);
  expect(capWebSearch({} as any, 10)).toEqual({});
  expect(webSearchBound({ tools: [{ name: 'x' }] } as any, 10)).toBe(0);
});

test('a max_uses that is present but not a positive integer is the client\'s 400, naming the tool; null is absent', () => {
  for (const v of [0, -1, 2.5, '5', 1e400]) {
    const tools = [{ name: 'x', input_schema: {} }, { ...WS, max_uses: v }];
    expect(() => capWebSearch({ tools } as any, 10)).toThrow(expect.objectContaining({ status: 400, param: 'tools.1.max_uses' }));
  }
  expect(capWebSearch({ tools: [{ ...WS, max_uses: null }] } as any, 10).tools).toEqual([{ ...WS, max_uses: 10 }]);
});
