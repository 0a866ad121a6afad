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
