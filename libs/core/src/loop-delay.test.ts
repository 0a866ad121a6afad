import { expect, test } from 'bun:test';
import { LoopDelayMonitor } from './loop-delay';

const busy = (ms: number) => { const t = performance.now(); while (performance.now() - t < ms) { /* block the loop */ } };

test('a blocked loop shows as delay at the top quantiles; reset starts a new window', async () => {
  const m = new LoopDelayMonitor(1);
  try {
    await Bun.sleep(30);
    busy(25);
    await Bun.sleep(10);
    const s = m.snapshot();
    expect(s.count).toBeGreaterThan(3);
    // The timer due during the 25 ms block fired at least ~20 ms late.
    expect(s.max).toBeGreaterThanOrEqual(20);
    expect(m.quantile(1)).toBe(s.max);
    expect(s.p50).toBeLessThanOrEqual(s.p99);
    expect(s.p99).toBeLessThanOrEqual(s.max);
    m.reset();
    const empty = m.snapshot();
    expect(empty.count).toBe(0);
    expect(empty.max).toBeNaN();
    await Bun.sleep(20);
    // A window without a block does not carry the earlier spike.
    expect(m.snapshot().max).toBeLessThan(s.max);
  } finally {
    m.stop();
  }
});

test('the sampling period must be a positive integer of ms', () => {
  expect(() => new LoopDelayMonitor(0)).toThrow(RangeError);
  expect(() => new LoopDelayMonitor(1.5)).toThrow(RangeError);
});
