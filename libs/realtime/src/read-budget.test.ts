import { expect, test } from 'bun:test';
import { FRAME_COST_BYTES, ReadBudget } from './read-budget';

test('a burst up to its size is free; past it a frame waits for its debt at the rate, then the budget refills', () => {
  let now = 0;
  const b = new ReadBudget(100_000, 200_000, () => now);
  expect(b.take(150_000)).toBe(0);
  expect(b.take(50_000)).toBe(0);
  expect(b.take(25_000)).toBe(250); // 25,000 bytes owed at 100,000/s
  now = 250;
  expect(b.take(0)).toBe(Math.ceil((FRAME_COST_BYTES * 1000) / 100_000)); // even an empty frame costs FRAME_COST_BYTES
  now = 10_000; // refills to the burst, never past it
  expect(b.take(200_000)).toBe(0);
  expect(b.take(1)).toBe(Math.ceil((FRAME_COST_BYTES * 1000) / 100_000));
});

test('every frame costs at least FRAME_COST_BYTES: tiny frames pass at rate / FRAME_COST_BYTES a second', () => {
  let now = 0;
  const b = new ReadBudget(FRAME_COST_BYTES * 10, FRAME_COST_BYTES * 10, () => now);
  for (let i = 0; i < 10; i++) expect(b.take(2)).toBe(0);
  expect(b.take(2)).toBe(100);
});

test('a rate of 0 never holds a frame', () => {
  const b = new ReadBudget(0, 10, () => 0);
  expect(b.take(1e9)).toBe(0);
});
