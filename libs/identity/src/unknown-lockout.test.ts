import { describe, expect, test } from 'bun:test';
import { UnknownNameLockout } from './unknown-lockout';

describe('UnknownNameLockout', () => {
  const policy = { maxFailures: 2, lockSeconds: 10 };

  test('locks after maxFailures for lockSeconds * 2^locks, like a stored account', () => {
    const l = new UnknownNameLockout(policy);
    const t = 1_000_000_000;
    l.recordFailure('x', t);
    expect(l.lockedUntil('x', t)).toBe(0);
    l.recordFailure('x', t);
    expect(l.lockedUntil('x', t)).toBe(t / 1000 + 10);
    l.recordFailure('x', t + 11_000);
    l.recordFailure('x', t + 11_000);
    expect(l.lockedUntil('x', t + 11_000)).toBe((t + 11_000) / 1000 + 20);
  });

  test('claim counts an attempt unless locked, and answers the lock that refuses it', () => {
    const l = new UnknownNameLockout(policy);
    const t = 1_000_000_000;
    expect(l.claim('x', t)).toBe(0);
    // The second counted attempt locks the name, for the attempts after it (like an account's last failure).
    expect(l.claim('x', t)).toBe(0);
    expect(l.claim('x', t)).toBe(t / 1000 + 10);
    expect(l.claim('x', t + 5_000)).toBe(t / 1000 + 10);
    // Refused claims count nothing: after the lock, two more lock again (doubled).
    expect(l.claim('x', t + 11_000)).toBe(0);
    expect(l.claim('x', t + 11_000)).toBe(0);
    expect(l.lockedUntil('x', t + 11_000)).toBe((t + 11_000) / 1000 + 20);
  });

  test('memory is bounded: the least recently failed name is evicted beyond the cap', () => {
    const l = new UnknownNameLockout(policy, 100);
    for (let i = 0; i < 1000; i++) l.recordFailure(`n${i}`, 1_000);
    expect(l.size).toBe(100);
    l.recordFailure('n999', 1_000);
    expect(l.lockedUntil('n999', 1_000)).toBeGreaterThan(0);
    expect(l.lockedUntil('n0', 1_000)).toBe(0);
  });

  test('an idle name is forgotten once its lock has ended and the idle time passed', () => {
    const l = new UnknownNameLockout(policy, 100, 60_000);
    l.recordFailure('x', 0);
    l.recordFailure('x', 0);
    expect(l.lockedUntil('x', 5_000)).toBe(10);
    expect(l.lockedUntil('x', 69_000)).toBe(10);
    expect(l.lockedUntil('x', 70_001)).toBe(0);
    expect(l.size).toBe(0);
  });
});
