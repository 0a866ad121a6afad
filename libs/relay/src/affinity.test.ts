import { describe, expect, test } from 'bun:test';
import { SessionAffinity, conversationOf } from './affinity';

const ch = (id: number, priority = 0) => ({ id, priority, weight: 1 });
const scope = { userId: 1, group: 'default', model: 'm' };

describe('SessionAffinity', () => {
  test('memory is bounded: the least recently used pin goes first', () => {
    const a = new SessionAffinity({ ttlMs: 60_000, maxEntries: 3, maxPerUser: 3 });
    const keys = ['s1', 's2', 's3', 's4'].map((s) => a.key(scope, s));
    keys.slice(0, 3).forEach((k, i) => a.pin(k, i + 10));
    a.apply([ch(99), ch(10)], keys[0]!); // a use does not refresh: only pin() does
    a.pin(keys[0]!, 10);
    a.pin(keys[3]!, 13);
    expect(a.size).toBe(3);
    expect(a.apply([ch(99), ch(11)], keys[1]!)[0]!.id).toBe(99); // s2 was the oldest: evicted
    expect(a.apply([ch(99), ch(10)], keys[0]!)[0]!.id).toBe(10);
  });

  test("one user's pins are capped: its own least recently used goes first, never another user's", () => {
    const a = new SessionAffinity({ ttlMs: 60_000, maxEntries: 10, maxPerUser: 3 });
    const victim = a.key({ ...scope, userId: 2 }, 'mine');
    a.pin(victim, 7);
    const flood = Array.from({ length: 50 }, (_, i) => a.key(scope, `s${i}`));
    for (const k of flood) a.pin(k, 8);
    // Before: one LRU for all, and the flood's 50 pins pushed the victim's out of the 10.
    expect(a.apply([ch(1), ch(7)], victim)[0]!.id).toBe(7);
    expect(a.size).toBe(4);
    expect(a.apply([ch(1), ch(8)], flood[49]!)[0]!.id).toBe(8);
    expect(a.apply([ch(1), ch(8)], flood[46]!)[0]!.id).toBe(1);
    // A refreshed pin is the user's most recent: the next one over the cap takes the oldest other.
    a.pin(flood[47]!, 8);
    a.pin(a.key(scope, 'new'), 8);
    expect(a.apply([ch(1), ch(8)], flood[47]!)[0]!.id).toBe(8);
    expect(a.apply([ch(1), ch(8)], flood[48]!)[0]!.id).toBe(1);
    // Unpinned and expired pins leave the user's count too.
    a.unpin(flood[47]!, 8);
    expect(a.size).toBe(3);
  });

  test('a pin expires ttl after its last use', () => {
    let now = 0;
    const a = new SessionAffinity({ ttlMs: 1000, maxEntries: 10, now: () => now });
    const k = a.key(scope, 'x');
    a.pin(k, 2);
    now = 999;
    expect(a.apply([ch(1), ch(2)], k)[0]!.id).toBe(2);
    now = 1000;
    expect(a.apply([ch(1), ch(2)], k)[0]!.id).toBe(1);
    expect(a.size).toBe(0);
  });

  test('only within the first tier; users, models and groups are pinned apart; ttl 0 is off', () => {
    const a = new SessionAffinity({ ttlMs: 1000, maxEntries: 10 });
    const k = a.key(scope, 'x');
    a.pin(k, 3);
    expect(a.apply([ch(1, 5), ch(3, 0)], k).map((c) => c.id)).toEqual([1, 3]);
    expect(a.apply([ch(1), ch(2), ch(3)], k).map((c) => c.id)).toEqual([3, 1, 2]);
    expect(a.apply([ch(1), ch(3)], a.key({ ...scope, userId: 2 }, 'x'))[0]!.id).toBe(1);
    expect(a.apply([ch(1), ch(3)], a.key({ ...scope, model: 'n' }, 'x'))[0]!.id).toBe(1);
    expect(new SessionAffinity({ ttlMs: 0, maxEntries: 10 }).key(scope, 'x')).toBeNull();
  });

  test('conversation: the session header, else metadata.user_id, else none', () => {
    expect(conversationOf(new Headers({ 'x-claude-code-session-id': 'abc' }), { metadata: { user_id: 'u' } })).toBe('h:abc');
    expect(conversationOf(new Headers(), { metadata: { user_id: 'u' } })).toBe('m:u');
    expect(conversationOf(new Headers(), { metadata: { user_id: 5 } })).toBeNull();
    expect(conversationOf(new Headers(), {})).toBeNull();
  });
});
