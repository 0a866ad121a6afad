import { describe, expect, test } from 'bun:test';
import { orderCandidates, seededRng } from './router';
import { pointerToParam } from '@gw/core';
import { isCalendarDate } from './validate';

describe('orderCandidates', () => {
  const chans = [
    { id: 1, priority: 0, weight: 1 }, { id: 2, priority: 10, weight: 3 },
    { id: 3, priority: 10, weight: 1 }, { id: 4, priority: 5, weight: 1 },
  ];
  test('priority tiers in order, every channel once', () => {
    const o = orderCandidates(chans, seededRng(7)).map((c) => c.id);
    expect(o.slice(0, 2).sort()).toEqual([2, 3]);
    expect(o.slice(2)).toEqual([4, 1]);
  });
  test('first pick inside a tier follows the weights (3:1)', () => {
    const rng = seededRng(42);
    let first2 = 0;
    const N = 4000;
    for (let i = 0; i < N; i++) if (orderCandidates(chans, rng)[0]!.id === 2) first2++;
    // Expected 0.75; 4 sigma of a binomial(4000, .75) is ~0.027.
    expect(first2 / N).toBeGreaterThan(0.72);
    expect(first2 / N).toBeLessThan(0.78);
  });
  test('the whole order follows the weights: each next pick in proportion to the weights left (3:2:1)', () => {
    const rng = seededRng(9);
    const tier = [{ id: 1, priority: 0, weight: 3 }, { id: 2, priority: 0, weight: 2 }, { id: 3, priority: 0, weight: 1 }];
    const seen = new Map<string, number>();
    const N = 6000;
    for (let i = 0; i < N; i++) {
      const k = orderCandidates(tier, rng).map((c) => c.id).join('');
      seen.set(k, (seen.get(k) ?? 0) + 1);
    }
    // P(123) = 3/6 * 2/3 = 1/3, P(132) = 3/6 * 1/3 = 1/6, P(213) = 2/6 * 3/4 = 1/4, P(321) = 1/6 * 2/5 = 1/15.
    for (const [k, p] of [['123', 1 / 3], ['132', 1 / 6], ['213', 1 / 4], ['321', 1 / 15]] as const) {
      expect(Math.abs((seen.get(k) ?? 0) / N - p)).toBeLessThan(0.025);
    }
  });
});

describe('helpers', () => {
  test('calendar dates and params', () => {
    expect(isCalendarDate('2023-06-01')).toBe(true);
    expect(isCalendarDate('2024-02-29')).toBe(true);
    expect(isCalendarDate('2023-02-29')).toBe(false);
    expect(isCalendarDate('2023-6-1')).toBe(false);
    expect(pointerToParam('/messages/0/role')).toBe('messages[0].role');
  });
});
