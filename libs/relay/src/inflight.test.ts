import { describe, expect, test } from 'bun:test';
import { ChangeBus, GatewayError } from '@gw/core';
import { InflightRegistry } from './inflight';

function registry() {
  const bus = new ChangeBus();
  const revokedKeys = new Set<number>();
  const disabledUsers = new Set<number>();
  const reg = new InflightRegistry({ bus, keyActive: (id) => !revokedKeys.has(id), userActive: (id) => !disabledUsers.has(id) });
  return { bus, reg, revokedKeys, disabledUsers };
}

describe('InflightRegistry', () => {
  test('a key change aborts only that key’s requests, and only when the key is no longer active', () => {
    const { bus, reg, revokedKeys } = registry();
    const a = reg.open(1, 10);
    const b = reg.open(2, 10);
    bus.emit('apikey.changed', { keyId: 1 }); // an edit that leaves the key usable
    expect(a.signal.aborted).toBe(false);
    revokedKeys.add(1);
    bus.emit('apikey.changed', { keyId: 1 });
    expect(a.signal.aborted).toBe(true);
    expect((a.signal.reason as GatewayError).code).toBe('api_key_revoked');
    expect(b.signal.aborted).toBe(false);
  });

  test('sweep (after a cache reload, which sends no events) stops the requests of revoked keys and disabled users, not of keys that only expired', () => {
    const bus = new ChangeBus();
    const revoked = new Set<number>([2]);
    const expired = new Set<number>([3]);
    const disabledUsers = new Set<number>([11]);
    const reg = new InflightRegistry({
      bus, keyActive: (id) => !revoked.has(id) && !expired.has(id), keyEnabled: (id) => !revoked.has(id), userActive: (id) => !disabledUsers.has(id),
    });
    revoked.delete(2);
    expired.delete(3);
    disabledUsers.delete(11);
    const [a, b, c, d] = [reg.open(1, 10), reg.open(2, 10), reg.open(3, 10), reg.open(4, 11)];
    revoked.add(2);
    revoked.add(4); // a disabled owner's keys leave the index too: the request is told the owner's reason
    expired.add(3);
    disabledUsers.add(11);
    reg.sweep();
    expect([a, b, c, d].map((h) => h.signal.aborted)).toEqual([false, true, false, true]);
    expect([(b.signal.reason as GatewayError).code, (d.signal.reason as GatewayError).code]).toEqual(['api_key_revoked', 'user_disabled']);
  });

  test('one, then several, then one request per key again: each is counted, revoked and forgotten exactly once', () => {
    const { bus, reg, revokedKeys } = registry();
    const a = reg.open(1, 10);
    expect(reg.size).toBe(1);
    const b = reg.open(1, 10);
    const c = reg.open(1, 10);
    expect(reg.size).toBe(3);
    a.release();
    a.release();
    b.release();
    expect(reg.size).toBe(1);
    const d = reg.open(1, 10);
    expect(reg.size).toBe(2);
    c.release();
    d.release();
    expect(reg.size).toBe(0);
    const e = reg.open(1, 10);
    const other = reg.open(2, 10);
    revokedKeys.add(1);
    bus.emit('apikey.changed', { keyId: 1 });
    expect([a, b, c, d, e, other].map((h) => h.signal.aborted)).toEqual([false, false, false, false, true, false]);
    e.release();
    other.release();
    expect(reg.size).toBe(0);
  });

  test('disabling a user aborts every request of all its keys', () => {
    const { bus, reg, disabledUsers } = registry();
    const a = reg.open(1, 10);
    const b = reg.open(2, 10);
    const c = reg.open(3, 11);
    disabledUsers.add(10);
    bus.emit('user.changed', { userId: 10 });
    expect([a, b, c].map((h) => h.signal.aborted)).toEqual([true, true, false]);
    expect((a.signal.reason as GatewayError).code).toBe('user_disabled');
  });

  test('a request opened after its key was revoked starts aborted; release forgets it', () => {
    const { reg, revokedKeys } = registry();
    revokedKeys.add(5);
    const h = reg.open(5, 1);
    expect(h.signal.aborted).toBe(true);
    expect(reg.size).toBe(1);
    h.release();
    h.release();
    expect(reg.size).toBe(0);
  });

  test('with the client signal, one signal follows both; only a revocation is reported as one; release stops following', () => {
    const { bus, reg, revokedKeys } = registry();
    const client = new AbortController();
    const h = reg.open(1, 10, client.signal);
    client.abort(new DOMException('gone', 'AbortError'));
    expect(h.signal.aborted).toBe(true);
    expect(h.revocation).toBeNull();
    const client2 = new AbortController();
    const h2 = reg.open(1, 10, client2.signal);
    revokedKeys.add(1);
    bus.emit('apikey.changed', { keyId: 1 });
    expect(h2.signal.aborted).toBe(true);
    expect(h2.revocation?.code).toBe('api_key_revoked');
    const client3 = new AbortController();
    const h3 = reg.open(2, 10, client3.signal);
    h3.release();
    client3.abort();
    expect(h3.signal.aborted).toBe(false);
    const h4 = reg.open(2, 10, AbortSignal.abort());
    expect(h4.signal.aborted).toBe(true);
  });
});
