import { expect, test } from 'bun:test';
import { PER_UNIT, costOf, costOfBig } from './money';

test('costOf in numbers equals the BigInt arithmetic: random, boundary and hostile inputs', () => {
  let seed = 42;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  const pick = (xs: number[]) => xs[Math.floor(rnd() * xs.length)]!;
  const special = [0, 1, 2, 999, 1000, 999_999, 1_000_000, 1_000_001, 3_000_000, 15_000_000, 2 ** 26, 2 ** 31, 2 ** 40, 2 ** 53 - 1, 2 ** 53, 1e300, -5, 1.5, NaN, Infinity];
  const count = () => (rnd() < 0.3 ? pick(special) : Math.floor(rnd() * 10 ** Math.floor(rnd() * 16)));
  for (let i = 0; i < 200_000; i++) {
    const parts = Array.from({ length: 1 + Math.floor(rnd() * 7) }, () => [count(), count()] as [number, number]);
    const ratio = rnd() < 0.5 ? 1000 : pick([0, 1, 500, 1500, 999, 1001, 123_456, 2 ** 30, count()]);
    const a = costOf(parts, ratio);
    const b = costOfBig(parts, ratio);
    if (a !== b) throw new Error(`${JSON.stringify(parts)} × ${ratio}: ${a} vs ${b}`);
  }
  // Near 2^53 a float division rounds k + 1e-9 down to k: the remainder must decide, not n / d.
  for (const n of [9_000_000_000_000_001, 9_007_199_000_000_001, 8_999_999_999_999_999, 4_503_599_627_370_497]) {
    expect(costOf([[n, 1]], 1)).toBe(costOfBig([[n, 1]], 1));
  }
  expect(costOf([[9_000_000_000_000_001, 1]], 1)).toBe(9_000_001);
  // Rounded up once: 1 token at 1 unit per million is 1 unit; exactly a million micro-units is 1.
  expect(costOf([[1, 1]])).toBe(1);
  expect(costOf([[1_000_000, 1]])).toBe(1);
  expect(costOf([[1_000_001, 1]])).toBe(2);
  expect(costOf([[0, 5]])).toBe(0);
  expect(costOf([[2 ** 53, 2 ** 53]])).toBe(Number.MAX_SAFE_INTEGER);
});

test('per-unit parts (web searches) cost count × price exactly, folded into the one rounding', () => {
  expect(costOf([[3, 5000, PER_UNIT]])).toBe(15_000);
  expect(costOf([[1000, 3_000], [3, 5000, PER_UNIT]])).toBe(3 + 15_000);
  // ×1.5 of (1 token at 1 per million + 1 search at 1): ceil(1.5 × 1_000_001 / 10⁶) = 2.
  expect(costOf([[1, 1], [1, 1, PER_UNIT]], 1500)).toBe(2);
  // Beyond 2^53 the BigInt arithmetic takes over, still exact.
  expect(costOf([[2 ** 40, 2 ** 20, PER_UNIT]])).toBe(Number.MAX_SAFE_INTEGER);
  expect(costOf([[9_000_000_000, 1_000_000, PER_UNIT]])).toBe(costOfBig([[9_000_000_000, 1_000_000, PER_UNIT]]));
  expect(costOf([[9_000_000_000, 1_000_000, PER_UNIT]])).toBe(9_000_000_000_000_000);
});
