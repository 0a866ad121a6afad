import { describe, expect, test } from 'bun:test';
import { CountCache } from './count-cache';

describe('CountCache', () => {
  test('reuses a count within the TTL, asks again after it; evicts the least recently used', async () => {
    let t = 0;
    let calls = 0;
    const c = new CountCache({ maxEntries: 2, ttlMs: 1000, maxInflight: 4, now: () => t });
    const ask = (n: number) => async () => { calls++; return n; };
    expect(await c.count(1, 'a', ask(1), () => -1)).toBe(1);
    expect(await c.count(1, 'a', ask(99), () => -1)).toBe(1);
    expect(calls).toBe(1);
    await c.count(1, 'b', ask(2), () => -1);
    await c.count(1, 'a', ask(99), () => -1); // a is now the most recent
    await c.count(1, 'c', ask(3), () => -1); // evicts b
    expect(await c.count(1, 'a', ask(99), () => -1)).toBe(1);
    expect(await c.count(1, 'b', ask(22), () => -1)).toBe(22);
    t = 5000;
    expect(await c.count(1, 'a', ask(11), () => -1)).toBe(11);
  });
  test('a failed or refused upstream count falls back and is not cached; the cap is per channel', async () => {
    const c = new CountCache({ maxEntries: 10, ttlMs: 1000, maxInflight: 1 });
    expect(await c.count(1, 'x', async () => { throw new Error('down'); }, () => 7)).toBe(7);
    expect(await c.count(1, 'x', async () => null, () => 8)).toBe(8);
    let release!: () => void;
    const slow = c.count(1, 'y', () => new Promise((r) => { release = () => r(5); }), () => -1);
    expect(await c.count(1, 'z', async () => 6, () => 9)).toBe(9); // channel 1 at its cap
    expect(await c.count(2, 'z', async () => 6, () => 9)).toBe(6); // channel 2 is not
    release();
    expect(await slow).toBe(5);
  });
});
