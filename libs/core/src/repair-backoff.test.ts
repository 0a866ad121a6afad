import { expect, test } from 'bun:test';
import { RepairBackoff } from './repair-backoff';

test('the wait doubles while failures come close together and starts over after a quiet spell', () => {
  let now = 0;
  const b = new RepairBackoff(4_000, () => now);
  const waits: number[] = [];
  for (let i = 0; i < 6; i++) { waits.push(b.next()); now += 100; }
  expect(waits).toEqual([250, 500, 1000, 2000, 4000, 4000]);
  now += 8_001; // longer than maxMs and twice the last wait
  expect(b.next()).toBe(250);
});
