import { expect, test } from 'bun:test';
import { MemoryRateLimits } from './rate-limits';
import { RateWindow } from './rate-window';

/**
 * MemoryRateLimits must decide exactly like the RateWindow it replaces (per-key RPM, login, 2FA and
 * reset limits), given the same clock: RateWindow's windows start when it is created, ours at
 * multiples of the window, so both start at t = 0 here. retry-after differs on purpose: RateWindow's is the
 * window's end, ours the moment the hit would pass (windowRetryAfter; exact in the contract suite), within
 * the two windows the estimate spans.
 */
test('same decisions and retry-after as RateWindow over a random sequence of hits', async () => {
  let now = 0;
  const clock = () => now;
  const windowMs = 60_000;
  const old = new RateWindow(windowMs, clock);
  const limits = new MemoryRateLimits(clock, 97);
  let seed = 42;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  let refused = 0;
  for (let i = 0; i < 20_000; i++) {
    now += Math.floor(rand() * rand() * 4_000);
    const key = `k${Math.floor(rand() * 4)}`;
    const limit = 1 + Math.floor(rand() * 30);
    const wait = old.hit(key, limit);
    const r = await limits.hit(key, { limit, windowMs });
    expect({ i, ok: r.ok }).toEqual({ i, ok: wait === 0 });
    if (!r.ok) {
      refused++;
      expect(r.retryAfterMs).toBeGreaterThanOrEqual(1);
      expect(r.retryAfterMs).toBeLessThanOrEqual(2 * windowMs + 1);
    }
  }
  // The sequence exercised both answers.
  expect(refused).toBeGreaterThan(1_000);
  expect(refused).toBeLessThan(19_000);
});
