import { describe, expect, test } from 'bun:test';
import { costOf, PER_UNIT } from '@gw/core';
import { oneHourWrite, priceUsage } from './tiers';
import { guardUsage } from './usage-guard';
import { worstCaseCost } from './worst-case';

const P = {
  input: 3_000_000, output: 15_000_000, cacheRead: 300_000, cacheWrite: 3_750_000, cacheWrite1h: 6_000_000, audioInput: 0, audioOutput: 0,
  longContextThreshold: 200_000, longContext: { input: 6_000_000, output: 22_500_000, cacheRead: 600_000, cacheWrite: 7_500_000, cacheWrite1h: 12_000_000 },
};

describe('priceUsage', () => {
  test('1-hour writes at their price, the rest of the writes at the 5-minute one; rounded up once', () => {
    expect(priceUsage({ input: 0, output: 0, cacheRead: 0, cacheWrite: 3, cacheWrite1h: 1 }, P)).toEqual({ cost: Math.ceil((2 * 3.75 + 6) / 1), longContext: false });
    // A 1-hour count above the writes never bills more than all writes at the 1-hour price.
    expect(priceUsage({ input: 0, output: 0, cacheRead: 0, cacheWrite: 1, cacheWrite1h: 99 }, P).cost).toBe(6);
    // No 1-hour price: 8/5 of the 5-minute one (Anthropic's 2× input against 1.25×), never the 5-minute price itself.
    expect(priceUsage({ input: 0, output: 0, cacheRead: 0, cacheWrite: 2, cacheWrite1h: 2 }, { ...P, cacheWrite1h: null }).cost).toBe(12);
    expect(priceUsage({ input: 0, output: 0, cacheRead: 0, cacheWrite: 1_000_000, cacheWrite1h: 1_000_000 }, { ...P, cacheWrite: 3, cacheWrite1h: null, longContext: null }).cost).toBe(5);
    // No cache-write price at all (0): writes of either TTL at the input price, never free.
    const plain = { ...P, cacheWrite: 0, cacheWrite1h: null, longContext: null };
    expect(priceUsage({ input: 0, output: 0, cacheRead: 0, cacheWrite: 1_000_000, cacheWrite1h: 400_000 }, plain).cost).toBe(P.input);
    expect(priceUsage({ input: 0, output: 0, cacheRead: 0, cacheWrite: 1_000_000, cacheWrite1h: 0 }, { ...plain, cacheWrite1h: 0 }).cost).toBe(P.input);
    // 8/5 of the dearest price the API takes is held at that price (a larger one would fail every price read).
    expect(oneHourWrite(1_000_000_000_000)).toBe(1_000_000_000_000);
    // The same in a long-context tier, at the tier's input price.
    const freeTier = { ...P, longContext: { ...P.longContext, cacheWrite: 0, cacheWrite1h: 0 } };
    expect(priceUsage({ input: 300_000, output: 0, cacheRead: 0, cacheWrite: 1_000_000, cacheWrite1h: 500_000 }, freeTier).cost).toBe(1_300_000 * 6);
  });

  test('the tier is chosen by input + cache reads + cache writes, strictly above the threshold, for the whole request', () => {
    expect(priceUsage({ input: 100_000, output: 1, cacheRead: 50_000, cacheWrite: 50_000 }, P).longContext).toBe(false);
    const long = priceUsage({ input: 100_000, output: 1, cacheRead: 50_000, cacheWrite: 50_001 }, P);
    expect(long.longContext).toBe(true);
    expect(long.cost).toBe(Math.ceil((100_000 * 6 + 22.5 + 50_000 * 0.6 + 50_001 * 7.5)));
    // Without a complete tier, nothing changes.
    expect(priceUsage({ input: 300_000, output: 0, cacheRead: 0, cacheWrite: 0 }, { ...P, longContext: null }).longContext).toBe(false);
  });

  test('the reservation uses the tier its input bound falls into', () => {
    expect(worstCaseCost({ input: 1_000, maxOutput: 10, maxInput: 1_000_000 }, P)).toBe(1_000 * 6 + 150);
    expect(worstCaseCost({ input: 300_000, maxOutput: 10, maxInput: 1_000_000 }, P)).toBe(300_000 * 12 + 225);
  });
});

describe('pricing reuses its parts between calls', () => {
  test('a call prices only its own counts, whatever the call before it priced (every kind, then one)', () => {
    const Q = { ...P, webSearch: 10_000_000, codeExecution: 50_000 };
    const all = { input: 900, output: 700, cacheRead: 500, cacheWrite: 400, cacheWrite1h: 100, audioInput: 30, audioOutput: 20, webSearch: 3, codeExecution: 2 };
    const fresh = (u: typeof all) => costOf([[u.input, Q.input], [u.output, Q.output], [u.cacheRead, Q.cacheRead], [u.cacheWrite - u.cacheWrite1h, Q.cacheWrite],
      [u.cacheWrite1h, Q.cacheWrite1h], [u.audioInput, Q.input], [u.audioOutput, Q.output], [u.webSearch, Q.webSearch, PER_UNIT], [u.codeExecution, Q.codeExecution, PER_UNIT]]);
    const only = { input: 5, output: 0, cacheRead: 0, cacheWrite: 0, cacheWrite1h: 0, audioInput: 0, audioOutput: 0, webSearch: 0, codeExecution: 0 };
    for (let i = 0; i < 3; i++) {
      expect(priceUsage(all, Q, 1000, Q.webSearch).cost).toBe(fresh(all));
      expect(priceUsage(only, Q, 1000, Q.webSearch).cost).toBe(fresh(only));
    }
    const limits = { input: 1000, maxInput: 1000, maxOutput: 100, maxWebSearch: 4, maxCodeExecution: 3 };
    const big = worstCaseCost(limits, Q, 1000);
    expect(worstCaseCost({ input: 10, maxInput: 1000, maxOutput: 0 }, Q, 1000)).toBe(costOf([[10, Q.cacheWrite1h]]));
    expect(worstCaseCost(limits, Q, 1000)).toBe(big);
  });
});

describe('guardUsage: the 1-hour writes are a part of the writes', () => {
  test('more 1-hour writes than writes: cut, flagged implausible; unusable: all writes at 1 hour, flagged invalid; absent: none', () => {
    expect(guardUsage({ input: 1, output: 1, cacheWrite: 10, cacheWrite1h: 11 }, {}, null)).toMatchObject({ usage: { cacheWrite1h: 10 }, flags: ['implausible'] });
    expect(guardUsage({ input: 1, output: 1, cacheWrite: 10, cacheWrite1h: '4' }, {}, null)).toMatchObject({ usage: { cacheWrite1h: 10 }, flags: ['invalid'] });
    expect(guardUsage({ input: 1, output: 1, cacheWrite: 10 }, {}, null)).toMatchObject({ usage: { cacheWrite1h: 0 }, flags: [] });
    // A context-window clamp of the writes takes the 1-hour part with it.
    expect(guardUsage({ input: 5, output: 1, cacheWrite: 10, cacheWrite1h: 10 }, {}, { maxInput: 8, maxOutput: 10, input: 5 }).usage).toMatchObject({ cacheWrite: 3, cacheWrite1h: 3 });
  });
});

describe('group price ratio (per-mille)', () => {
  const Q = { input: 333_333, output: 0, cacheRead: 0, cacheWrite: 0, audioInput: 0, audioOutput: 0 };
  test('folded into the one rounding: exact against BigInt, never a rounding of a rounding', () => {
    // 1000 × 333,333 × 1.5 / 10⁶ = 499.9995 → 500 (rounding the ×1 cost first would give ceil(334 × 1.5) = 501).
    expect(priceUsage({ input: 1000, output: 0, cacheRead: 0, cacheWrite: 0 }, Q, 1500).cost).toBe(500);
    for (const [tokens, ratio] of [[1, 1500], [7, 333], [123_456_789, 1001], [999_999, 0], [5, 1_000_000]] as const) {
      const exact = (BigInt(tokens) * 333_333n * BigInt(ratio) + 999_999_999n) / 1_000_000_000n;
      expect(priceUsage({ input: tokens, output: 0, cacheRead: 0, cacheWrite: 0 }, Q, ratio).cost).toBe(Number(exact));
    }
    expect(priceUsage({ input: 1000, output: 0, cacheRead: 0, cacheWrite: 0 }, Q).cost).toBe(334);
  });
  test('the reservation carries the ratio, so it still covers the charge', () => {
    const l = { input: 1_000, maxOutput: 10, maxInput: 1_000_000 };
    expect(worstCaseCost(l, P, 1500)).toBe(Math.ceil((1_000 * 6 + 150) * 1.5));
    expect(worstCaseCost(l, P, 1500)).toBeGreaterThan(worstCaseCost(l, P));
  });
});
