import { describe, expect, test } from 'bun:test';
import { costOf } from '@gw/core';
import { guardUsage } from './usage-guard';
import { costFor } from './usage';
import { priceUsage } from './tiers';
import { worstCaseCost } from './worst-case';

// Hostile values an upstream (or a bug) can produce; JSON.parse('1e400') is Infinity.
const HOSTILE: unknown[] = [1.5, Infinity, -Infinity, NaN, -5, -0, '7', null, undefined, {}, [], true, 2 ** 53 + 2, 1e20, Number.MAX_VALUE, -1e-300, 4e15];
const COUNTS: unknown[] = [...HOSTILE, 0, 1, 7, 199_999, 200_000, 200_001];
const KINDS = ['input', 'output', 'cacheRead', 'cacheWrite', 'audioInput', 'audioOutput'] as const;
const PRICES = [0, 1, 3_000_000, 1_000_000_000_000, 1.5, -1, NaN, Infinity];

/** A small deterministic PRNG so failures reproduce. */
function rng(seed: number) {
  return () => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31);
}
const pick = <T>(r: () => number, xs: readonly T[]) => xs[Math.floor(r() * xs.length)]!;
const safe = (n: number) => Number.isSafeInteger(n) && n >= 0;

describe('money never throws and never goes wrong', () => {
  test('costOf / costFor: any counts and prices give a non-negative safe integer', () => {
    const r = rng(42);
    for (let i = 0; i < 5000; i++) {
      const u = Object.fromEntries(KINDS.map((k) => [k, pick(r, COUNTS)])) as any;
      const p = { input: pick(r, PRICES), output: pick(r, PRICES), cacheRead: pick(r, PRICES), cacheWrite: pick(r, PRICES), audioInput: pick(r, PRICES), audioOutput: pick(r, PRICES) };
      expect(safe(costFor(u, p))).toBe(true);
      expect(safe(costOf([[pick(r, COUNTS) as number, pick(r, PRICES)]]))).toBe(true);
    }
  });

  test('guardUsage: every count is a safe integer within the limits; bad fields are flagged, good ones kept', () => {
    const r = rng(7);
    const limits = { maxInput: 200_000, maxOutput: 100, input: 50 };
    for (let i = 0; i < 5000; i++) {
      const reported = Object.fromEntries(KINDS.map((k) => [k, pick(r, COUNTS)])) as any;
      const { usage, flags } = guardUsage(reported, { output: 3 }, limits);
      for (const k of KINDS) expect(safe(usage[k])).toBe(true);
      expect(usage.input + usage.cacheRead + usage.cacheWrite + usage.audioInput).toBeLessThanOrEqual(limits.maxInput);
      expect(usage.output + usage.audioOutput).toBeLessThanOrEqual(limits.maxOutput);
      const bad = KINDS.some((k) => reported[k] !== undefined && reported[k] !== null && !safe(reported[k]));
      expect(flags.includes('invalid')).toBe(bad);
      expect(safe(costFor(usage, { input: 3_000_000, output: 15_000_000, cacheRead: 300_000, cacheWrite: 3_750_000, audioInput: 1, audioOutput: 1 }))).toBe(true);
    }
  });

  test('fallbacks: a bad input takes the reserved input, a bad output the estimate, else the max output', () => {
    const limits = { maxInput: 1000, maxOutput: 100, input: 50 };
    expect(guardUsage({ input: -5, output: 1.5 }, { output: 3 }, limits).usage).toMatchObject({ input: 50, output: 3 });
    expect(guardUsage({ input: 10, output: '7' }, {}, limits).usage).toMatchObject({ input: 10, output: 100 });
    expect(guardUsage(null, { input: 12, output: 4 }, limits)).toMatchObject({ usage: { input: 12, output: 4 }, flags: ['estimated'] });
    expect(guardUsage({ input: 10, output: 5, cacheRead: null }, {}, limits)).toMatchObject({ usage: { cacheRead: 0 }, flags: [] });
  });
});

describe('web searches', () => {
  const limits = { maxInput: 1000, maxOutput: 100, input: 50, maxWebSearch: 10 };
  const base = { input: 10, output: 5 };
  test('a usable count is kept; absent is none', () => {
    expect(guardUsage({ ...base, webSearch: 3 }, {}, limits)).toEqual({ usage: expect.objectContaining({ webSearch: 3 }), flags: [] });
    expect(guardUsage(base, {}, limits).usage.webSearch).toBe(0);
    expect(guardUsage({ ...base, webSearch: null }, {}, limits)).toEqual({ usage: expect.objectContaining({ webSearch: 0 }), flags: [] });
  });
  test('above the bound: clamped to Σ max_uses and flagged implausible', () => {
    expect(guardUsage({ ...base, webSearch: 11 }, {}, limits)).toEqual({ usage: expect.objectContaining({ webSearch: 10 }), flags: ['implausible'] });
    // No web-search tool in the request: nothing can have been searched.
    expect(guardUsage({ ...base, webSearch: 2 }, {}, { ...limits, maxWebSearch: undefined })).toEqual({ usage: expect.objectContaining({ webSearch: 0 }), flags: ['implausible'] });
  });
  test('an unusable count is billed at the bound and flagged invalid', () => {
    for (const bad of [-1, 2.5, '3', NaN, Infinity, {}, true]) {
      expect(guardUsage({ ...base, webSearch: bad }, {}, limits)).toEqual({ usage: expect.objectContaining({ webSearch: 10 }), flags: ['invalid'] });
    }
  });
  test('priced per search on top of tokens, exactly', () => {
    const price = { input: 1_000_000, output: 2_000_000, cacheRead: 0, cacheWrite: 0, audioInput: 0, audioOutput: 0, webSearch: 5000 };
    expect(costFor({ input: 10, output: 5, cacheRead: 0, cacheWrite: 0, webSearch: 3 }, price)).toBe(10 + 10 + 15_000);
    expect(costFor({ input: 10, output: 5, cacheRead: 0, cacheWrite: 0, webSearch: 3 }, price, 7)).toBe(20 + 21);
  });
});

describe('code-execution calls', () => {
  const limits = { maxInput: 1000, maxOutput: 100, input: 50, maxCodeExecution: 20 };
  const base = { input: 10, output: 5 };
  test('a usable count is kept; absent is none; the fallback (a cut stream) stands in for none', () => {
    expect(guardUsage({ ...base, codeExecution: 3 }, {}, limits)).toEqual({ usage: expect.objectContaining({ codeExecution: 3 }), flags: [] });
    expect(guardUsage(base, {}, limits).usage.codeExecution).toBe(0);
    expect(guardUsage(null, { ...base, codeExecution: 2 }, limits).usage.codeExecution).toBe(2);
  });
  test('above CODE_EXECUTION_MAX_CALLS: clamped and flagged implausible; none without the tool', () => {
    expect(guardUsage({ ...base, codeExecution: 21 }, {}, limits)).toEqual({ usage: expect.objectContaining({ codeExecution: 20 }), flags: ['implausible'] });
    expect(guardUsage({ ...base, codeExecution: 2 }, {}, { ...limits, maxCodeExecution: undefined })).toEqual({ usage: expect.objectContaining({ codeExecution: 0 }), flags: ['implausible'] });
  });
  test('priced per call at the row\'s code_execution (unset: 0), with the ratio in the one rounding', () => {
    const price = { input: 1_000_000, output: 2_000_000, cacheRead: 0, cacheWrite: 0, audioInput: 0, audioOutput: 0, codeExecution: 2084 };
    expect(costFor({ input: 10, output: 5, cacheRead: 0, cacheWrite: 0, codeExecution: 3 }, price)).toBe(20 + 3 * 2084);
    expect(costFor({ input: 10, output: 5, cacheRead: 0, cacheWrite: 0, codeExecution: 3, webSearch: 1 }, { ...price, webSearch: 7 })).toBe(20 + 3 * 2084 + 7);
    expect(costFor({ input: 10, output: 5, cacheRead: 0, cacheWrite: 0, codeExecution: 3 }, { ...price, codeExecution: null })).toBe(20);
    expect(priceUsage({ input: 1, output: 0, cacheRead: 0, cacheWrite: 0, codeExecution: 1 }, { ...price, input: 1, codeExecution: 1 }, 1500).cost).toBe(2);
  });
  test('the worst case adds CODE_EXECUTION_MAX_CALLS × the price', () => {
    const price = { input: 1_000_000, output: 2_000_000, cacheRead: 0, cacheWrite: 0, audioInput: 0, audioOutput: 0, codeExecution: 100 };
    expect(worstCaseCost(limits, price)).toBe(50 + 200 + 20 * 100);
    expect(worstCaseCost({ ...limits, maxCodeExecution: undefined }, price)).toBe(250);
  });
});
