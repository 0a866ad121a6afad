import { describe, expect, test } from 'bun:test';
import { foldUsage } from './usage-fold';
import { usageFromOpenAI } from './common';
import type { Usage } from '../anthropic/response';

const fold = (...reports: object[]): Usage => reports.reduce<Usage | null>((u, r) => foldUsage(u, usageFromOpenAI(r as never)).usage, null)!;

describe('foldUsage', () => {
  test('the highest completion count is billed, not the last', () => {
    expect(fold({ prompt_tokens: 10, completion_tokens: 5000 }, { prompt_tokens: 10, completion_tokens: 6 }).output_tokens).toBe(5000);
    expect(fold({ prompt_tokens: 10, completion_tokens: 6 }, { prompt_tokens: 10, completion_tokens: 5000 }).output_tokens).toBe(5000);
  });

  test('the prompt is one total: a later all-cached copy of the same prompt does not replace the uncached one', () => {
    const u = fold({ prompt_tokens: 1000, completion_tokens: 5 }, { prompt_tokens: 1000, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 1000 } });
    expect(u).toMatchObject({ input_tokens: 1000, cache_read_input_tokens: 0 });
  });

  test('a higher prompt total wins even with more cache reads', () => {
    const u = fold({ prompt_tokens: 100, completion_tokens: 1 }, { prompt_tokens: 900, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 850 } });
    expect(u).toMatchObject({ input_tokens: 50, cache_read_input_tokens: 850 });
  });

  test('a usable count beats an unusable one; a report without a count keeps the earlier one', () => {
    expect(fold({ prompt_tokens: 10, completion_tokens: 50 }, { prompt_tokens: 10, completion_tokens: -1 }).output_tokens).toBe(50);
    expect(fold({ prompt_tokens: 10, completion_tokens: '7' }, { prompt_tokens: 10, completion_tokens: 3 }).output_tokens).toBe(3);
    expect(fold({ prompt_tokens: 40 }, { completion_tokens: 9 })).toMatchObject({ input_tokens: 40, output_tokens: 9 });
    expect(fold({ prompt_tokens: 40, completion_tokens: 9 }, {})).toMatchObject({ input_tokens: 40, output_tokens: 9 });
  });
});
