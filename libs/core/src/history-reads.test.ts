import { describe, expect, test } from 'bun:test';
import { HistoryReadGate } from './history-reads';
import { GatewayError } from './errors';

describe('HistoryReadGate', () => {
  test('a caller past its share is refused at once with 429; a failed read gives its share back', async () => {
    const gate = new HistoryReadGate({ perCaller: 2, slots: 1 });
    let release!: () => void;
    const held = new Promise<void>((r) => { release = r; });
    const a = gate.run(1, () => held);
    const b = gate.run(1, () => 'b');
    const refused = (() => { try { gate.enter(1); return null; } catch (e) { return e as GatewayError; } })();
    expect(refused).toBeInstanceOf(GatewayError);
    expect(refused).toMatchObject({ status: 429, code: 'too_many_requests', headers: { 'retry-after': '1' } });
    // Another caller is not refused (it queues for the slot).
    const c = gate.run(2, () => 'c');
    release();
    expect(await Promise.all([a, b, c])).toEqual([undefined, 'b', 'c']);
    await expect(gate.run(1, () => { throw new Error('boom'); })).rejects.toThrow('boom');
    expect(gate.heldBy(1)).toBe(0);
    expect(gate.heldBy(2)).toBe(0);
  });

  test('queries run `slots` at a time, each after the event loop polled once', async () => {
    const gate = new HistoryReadGate({ perCaller: 100, slots: 2 });
    let running = 0;
    let peak = 0;
    let ticks = 0;
    const timer = setInterval(() => ticks++, 0);
    const order: number[] = [];
    await Promise.all(Array.from({ length: 8 }, (_, i) => gate.run(i, async () => {
      running++;
      peak = Math.max(peak, running);
      const t = performance.now();
      while (performance.now() - t < 3) { /* a synchronous query */ }
      order.push(i);
      await Bun.sleep(1);
      running--;
    })));
    clearInterval(timer);
    expect(peak).toBe(2);
    expect(order).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    // Timers (I/O's stand-in) ran between the synchronous parts.
    expect(ticks).toBeGreaterThan(2);
  });
});

describe('HistoryReadGate after a timeout', () => {
  const timeout = () => Promise.reject(new GatewayError(503, 'history_timeout', 'stopped'));
  test('a cheap read sent beside the slow one does not end the pause; a read started after it does', async () => {
    let now = 0;
    const gate = new HistoryReadGate({ perCaller: 4, slots: 2 }, () => now);
    let finish!: () => void;
    const cheap = gate.run(7, () => new Promise<number>((r) => { finish = () => r(1); }));
    await expect(gate.run(7, timeout)).rejects.toMatchObject({ code: 'history_timeout' });
    finish();
    expect(await cheap).toBe(1);
    await expect(gate.run(7, () => 2)).rejects.toMatchObject({ status: 429, code: 'too_many_requests' });
    // Another caller is never paused by this one.
    expect(await gate.run(8, () => 3)).toBe(3);
    now = 1_000;
    expect(await gate.run(7, () => 4)).toBe(4);
    await expect(gate.run(7, timeout)).rejects.toMatchObject({ code: 'history_timeout' });
    // The run ended: 1 s again, not 2 s.
    await expect(gate.run(7, () => 5)).rejects.toMatchObject({ headers: { 'retry-after': '1' } });
  });

  test('the pause doubles with each timeout in a row up to its cap, and a queued read is refused, not run', async () => {
    let now = 0;
    const gate = new HistoryReadGate({ perCaller: 4, slots: 1, maxTimeoutPauseMs: 4_000 }, () => now);
    const pauses: string[] = [];
    for (let i = 0; i < 4; i++) {
      await expect(gate.run(1, timeout)).rejects.toMatchObject({ code: 'history_timeout' });
      const refused = await gate.run(1, () => 0).catch((e) => e);
      pauses.push(refused.headers['retry-after']);
      now += 10_000;
    }
    expect(pauses).toEqual(['1', '2', '4', '4']);
    let ran = false;
    const slow = gate.run(1, timeout);
    const queued = gate.run(1, () => { ran = true; }).catch((e) => e);
    await expect(slow).rejects.toMatchObject({ code: 'history_timeout' });
    expect(await queued).toMatchObject({ status: 429 });
    expect(ran).toBe(false);
  });

  test("the timeout's own 503 says when the caller may read again; a streaming export's next page is not cut off by a pause", async () => {
    let now = 0;
    const gate = new HistoryReadGate({ perCaller: 4, slots: 2 }, () => now);
    await expect(gate.run(3, timeout)).rejects.toMatchObject({ status: 503, headers: { 'retry-after': '1' } });
    await expect(gate.run(3, () => 0)).rejects.toMatchObject({ status: 429 });
    await expect(gate.query(timeout, 3, Infinity, { midRead: true })).rejects.toMatchObject({ status: 503, headers: { 'retry-after': '2' } });
    // Paused for 2 s now: a fresh read is refused, an export's next page (already answered 200) runs.
    await expect(gate.run(3, () => 0)).rejects.toMatchObject({ status: 429 });
    expect(await gate.query(() => 'page', 3, Infinity, { midRead: true })).toBe('page');
  });
});
