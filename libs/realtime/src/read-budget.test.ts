import { expect, test } from 'bun:test';
import { ReadBudget } from './read-budget';

test('a burst up to its size is free; past it a frame waits for its debt at the rate, then the budget refills', () => {
  let now = 0;
  const b = new ReadBudget(1000, 2000, () => now);
  expect(b.take(1500)).toBe(0);
  expect(b.take(500)).toBe(0);
  expect(b.take(250)).toBe(250); // 250 bytes owed at 1000/s
  now = 250;
  expect(b.take(0)).toBe(0);
  now = 10_000; // refills to the burst, never past it
  expect(b.take(2000)).toBe(0);
  expect(b.take(1)).toBe(1);
});

test('a rate of 0 never holds a frame', () => {
  const b = new ReadBudget(0, 10, () => 0);
  expect(b.take(1e9)).toBe(0);
});
