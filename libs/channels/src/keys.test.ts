import { expect, test } from 'bun:test';
import { KeyStats } from './keys';

test("a key put again and again under one id keeps one id's counters, not one per value it ever held", () => {
  // An operator (or a script) replacing key 1 in a loop, each value used once: every value kept its own
  // counters until the key id was removed, so memory grew with every replacement.
  const stats = new KeyStats();
  for (let i = 0; i < 1000; i++) stats.record(7, { id: 1, fingerprint: `fp${i}` }, true);
  expect(stats.size).toBeLessThanOrEqual(2);
  // The current value's counters are its own; a request still in flight with the value before counts to that one.
  expect(stats.get(7, { id: 1, fingerprint: 'fp999' }).requests).toBe(1);
  stats.record(7, { id: 1, fingerprint: 'fp998' }, false);
  expect(stats.get(7, { id: 1, fingerprint: 'fp998' })).toMatchObject({ requests: 2, failures: 1 });
  expect(stats.get(7, { id: 1, fingerprint: 'fp999' }).requests).toBe(1);
  expect(stats.get(7, { id: 1, fingerprint: 'fp0' }).requests).toBe(0);
  stats.record(7, { id: 2, fingerprint: 'x' }, true);
  stats.record(71, { id: 1, fingerprint: 'y' }, true);
  stats.forget(7, 1);
  expect(stats.get(7, { id: 2, fingerprint: 'x' }).requests).toBe(1);
  stats.forget(7);
  expect(stats.size).toBe(1);
  expect(stats.get(71, { id: 1, fingerprint: 'y' }).requests).toBe(1);
});
