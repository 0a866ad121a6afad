/**
 * The RateLimits contract, run against every implementation. `node()` returns a limiter the way
 * another gateway node would see the same store (for Redis: a new connection), so the concurrency
 * cases exercise atomicity across nodes. Clocks are real: the Redis scripts read the server's.
 */
import { expect, test } from 'bun:test';
import type { RateLimits } from './rate-limits';

export interface RateLimitsFactory {
  node(): RateLimits;
}

let n = 0;
const uniq = (what: string) => `${what}-${process.pid}-${++n}-${Math.random().toString(36).slice(2, 8)}`;

/** Sleeps until just after a window boundary, so a burst does not straddle two windows. */
async function alignToWindow(windowMs: number, slackMs = 30): Promise<void> {
  const into = Date.now() % windowMs;
  await Bun.sleep(windowMs - into + slackMs);
}

export function rateLimitsContract(f: RateLimitsFactory): void {
  test('allows `limit` hits per window, then refuses with the time left in the window', async () => {
    const rl = f.node();
    const key = uniq('burst');
    const w = 2_000;
    await alignToWindow(w);
    const results = [];
    for (let i = 0; i < 6; i++) results.push(await rl.hit(key, { limit: 5, windowMs: w }));
    expect(results.map((r) => r.ok)).toEqual([true, true, true, true, true, false]);
    expect(results.map((r) => r.remaining)).toEqual([4, 3, 2, 1, 0, 0]);
    expect(results[0]!.retryAfterMs).toBe(0);
    expect(results[5]!.retryAfterMs).toBeGreaterThan(w / 2);
    expect(results[5]!.retryAfterMs).toBeLessThanOrEqual(w);
  });

  test('cost counts units; a refused hit is not counted; keys are independent; reset forgets', async () => {
    const rl = f.node();
    const [a, b] = [uniq('cost'), uniq('cost')];
    const w = 60_000;
    if (Date.now() % w > w - 3_000) await alignToWindow(w);
    const opts = (cost: number) => ({ limit: 10, windowMs: w, cost });
    expect((await rl.hit(a, opts(4))).remaining).toBe(6);
    expect((await rl.hit(a, opts(4))).remaining).toBe(2);
    const refused = await rl.hit(a, opts(4));
    expect(refused.ok).toBe(false);
    expect(refused.remaining).toBe(2);
    expect(await rl.hit(a, opts(2))).toMatchObject({ ok: true, retryAfterMs: 0, remaining: 0 });
    expect((await rl.hit(b, opts(10))).ok).toBe(true);
    await rl.reset(a);
    expect(await rl.hit(a, opts(10))).toMatchObject({ ok: true, retryAfterMs: 0, remaining: 0 });
    // Fractional costs round up; a window of 0 or NaN ms is 1 ms, never a division by zero.
    expect((await rl.hit(uniq('frac'), { limit: 10, windowMs: w, cost: 1.5 })).remaining).toBe(8);
    expect((await rl.hit(uniq('nan'), { limit: 10, windowMs: Number.NaN })).ok).toBe(true);
  });

  test('the previous window still counts, weighted by how much of it the sliding window covers', async () => {
    const rl = f.node();
    const key = uniq('slide');
    const w = 1_000;
    await alignToWindow(w);
    expect((await rl.hit(key, { limit: 100, windowMs: w, cost: 100 })).ok).toBe(true);
    // Halfway into the next window about half of the previous one's 100 still counts.
    await alignToWindow(w, w / 2);
    const mid = await rl.hit(key, { limit: 100, windowMs: w });
    expect(mid.ok).toBe(true);
    expect(mid.remaining).toBeGreaterThanOrEqual(100 - 70 - 1);
    expect(mid.remaining).toBeLessThanOrEqual(100 - 30 - 1);
    // Two windows later nothing of it is left.
    await alignToWindow(w);
    await alignToWindow(w, 10);
    expect((await rl.hit(key, { limit: 100, windowMs: w })).remaining).toBe(99);
  }, 30_000);

  test('retryAfterMs is when the hit would pass: early while the previous window fades, late after a full one', async () => {
    const rl = f.node();
    const w = 2_000;
    // A full previous window and one hit in this one: refused now, but the previous window's weight falls
    // below the room within a tenth of this window, not at its end.
    const fading = uniq('fading');
    await alignToWindow(w);
    expect((await rl.hit(fading, { limit: 10, windowMs: w, cost: 10 })).ok).toBe(true);
    await alignToWindow(w, 30);
    expect((await rl.hit(fading, { limit: 10, windowMs: w })).ok).toBe(true);
    const early = await rl.hit(fading, { limit: 10, windowMs: w });
    expect(early.ok).toBe(false);
    expect(early.retryAfterMs).toBeLessThan(w / 4);
    await Bun.sleep(early.retryAfterMs);
    expect((await rl.hit(fading, { limit: 10, windowMs: w })).ok).toBe(true);
    // A window full of large hits: at its end it still weighs almost whole, so the next large hit passes only
    // once 4/10 of the next window have gone by.
    const full = uniq('full');
    await alignToWindow(w);
    for (let i = 0; i < 2; i++) expect((await rl.hit(full, { limit: 10, windowMs: w, cost: 5 })).ok).toBe(true);
    const late = await rl.hit(full, { limit: 10, windowMs: w, cost: 5 });
    expect(late.ok).toBe(false);
    const end = w - (Date.now() % w);
    expect(late.retryAfterMs).toBeGreaterThan(end + w * 0.3);
    expect(late.retryAfterMs).toBeLessThan(end + w * 0.5);
    await Bun.sleep(late.retryAfterMs);
    expect((await rl.hit(full, { limit: 10, windowMs: w, cost: 5 })).ok).toBe(true);
  }, 30_000);

  test('unhit gives a passed hit back to its window, or to the previous one once it has rolled', async () => {
    const rl = f.node();
    const key = uniq('unhit');
    const w = 1_000;
    await alignToWindow(w);
    const first = await rl.hit(key, { limit: 10, windowMs: w, cost: 10 });
    expect(first.ok).toBe(true);
    expect(first.windowStart % w).toBe(0);
    expect((await rl.hit(key, { limit: 10, windowMs: w, cost: 4 })).ok).toBe(false);
    await rl.unhit(key, { windowMs: w, cost: 6, windowStart: first.windowStart });
    expect((await rl.hit(key, { limit: 10, windowMs: w, cost: 4 })).remaining).toBe(2);
    // Next window: the previous one's 8 weigh almost whole until given back.
    await alignToWindow(w, 20);
    await rl.unhit(key, { windowMs: w, cost: 8, windowStart: first.windowStart });
    expect((await rl.hit(key, { limit: 10, windowMs: w, cost: 10 })).ok).toBe(true);
    // A window two behind is gone: nothing to give back, nothing goes negative.
    await rl.unhit(key, { windowMs: w, cost: 100, windowStart: first.windowStart - w });
    expect((await rl.hit(key, { limit: 10, windowMs: w })).ok).toBe(false);
  }, 30_000);

  test('concurrent hits from three nodes: exactly `limit` pass', async () => {
    const nodes = [f.node(), f.node(), f.node()];
    const key = uniq('race');
    const w = 60_000;
    if (Date.now() % w > w - 3_000) await alignToWindow(w);
    const results = await Promise.all(Array.from({ length: 90 }, (_, i) => nodes[i % 3]!.hit(key, { limit: 30, windowMs: w })));
    expect(results.filter((r) => r.ok).length).toBe(30);
  });

  test('leases: at most `max` live, release frees a slot (idempotently), expiry frees it too', async () => {
    const rl = f.node();
    const key = uniq('lease');
    const a = await rl.acquire(key, { max: 2, leaseMs: 10_000 });
    const b = await rl.acquire(key, { max: 2, leaseMs: 300 });
    expect(a).not.toBeNull();
    expect(b).not.toBeNull();
    expect(await rl.acquire(key, { max: 2, leaseMs: 10_000 })).toBeNull();
    expect(await rl.active(key)).toBe(2);
    await rl.release(a!);
    await rl.release(a!);
    expect(await rl.active(key)).toBe(1);
    const c = await rl.acquire(key, { max: 2, leaseMs: 10_000 });
    expect(c).not.toBeNull();
    // b's holder never renews (a dead node): its slot comes back after the lease.
    await Bun.sleep(400);
    expect(await rl.active(key)).toBe(1);
    expect(await rl.acquire(key, { max: 2, leaseMs: 10_000 })).not.toBeNull();
  });

  test('renew keeps a lease alive past its lease time; renewing an expired one counts it again', async () => {
    const rl = f.node();
    const key = uniq('renew');
    const lease = (await rl.acquire(key, { max: 1, leaseMs: 200 }))!;
    for (let i = 0; i < 5; i++) {
      await Bun.sleep(80);
      expect(await rl.renew(lease, 200)).toBe(true);
    }
    expect(await rl.acquire(key, { max: 1, leaseMs: 200 })).toBeNull();
    await Bun.sleep(300);
    expect(await rl.active(key)).toBe(0);
    expect(await rl.renew(lease, 10_000)).toBe(false);
    expect(await rl.active(key)).toBe(1);
    expect(await rl.acquire(key, { max: 1, leaseMs: 200 })).toBeNull();
  });

  test('concurrent acquires from three nodes: exactly `max` leases', async () => {
    const nodes = [f.node(), f.node(), f.node()];
    const key = uniq('slots');
    const got = await Promise.all(Array.from({ length: 30 }, (_, i) => nodes[i % 3]!.acquire(key, { max: 5, leaseMs: 10_000 })));
    expect(got.filter(Boolean).length).toBe(5);
    expect(new Set(got.filter(Boolean).map((l) => l!.id)).size).toBe(5);
  });
}
