/**
 * The leader's reconciler: lapsed holds are released against the ledger, and the mirrors of users
 * admitting now are brought up to the ledger's versions, so a balance move whose mirror update was
 * lost (Redis answered an error, or the writer died between its commit and the update) cannot keep
 * an old, higher balance admitting on every node until that user's next charge.
 */
import { describe, expect, test } from 'bun:test';
import { MemoryHoldStore } from './memory';
import type { Mirror } from './port';
import { HoldReconciler, type LedgerTruth } from './reconciler';

class Ledger implements LedgerTruth {
  user: Mirror = { balance: 1_000, version: 1 };
  key: Mirror = { balance: 600, version: 1 };
  settledRefs = new Set<string>();
  async settled(ref: string) { return this.settledRefs.has(ref); }
  async mirrors() { return { user: { ...this.user }, key: { ...this.key } }; }
  async accounts(userIds: number[]) {
    return userIds.filter((u) => u === 1).map((userId) => ({ userId, user: { ...this.user }, keys: [{ keyId: 7, mirror: { ...this.key } }] }));
  }
}

function setup() {
  let now = 0;
  const ledger = new Ledger();
  const store = new MemoryHoldStore(async () => ({ user: { ...ledger.user }, key: { ...ledger.key } }), () => now);
  const rec = new HoldReconciler(store, ledger, { intervalMs: 1_000 });
  return { ledger, store, rec, at: (t: number) => { now = t; } };
}

describe('HoldReconciler', () => {
  test('a lapsed hold is released with the ledger balances; a live one stays', async () => {
    const { ledger, store, rec, at } = setup();
    await store.reserve({ userId: 1, keyId: 7, amount: 100, ref: 'dead', leaseMs: 1_000 });
    await store.reserve({ userId: 1, keyId: 7, amount: 50, ref: 'live', leaseMs: 10_000 });
    // The dead node's request was committed before it died: 80 charged.
    ledger.settledRefs.add('dead');
    ledger.user = { balance: 920, version: 2 };
    ledger.key = { balance: 520, version: 2 };
    at(2_000);
    expect(await rec.runOnce()).toBe(1);
    expect(await store.available({ userId: 1, keyId: 7 })).toEqual({ user: 920 - 50, key: 520 - 50 });
  });

  test('a balance lowered in the ledger whose mirror update was lost: the next pass installs it for users with holds', async () => {
    const { ledger, store, rec } = setup();
    await store.reserve({ userId: 1, keyId: 7, amount: 100, ref: 'a', leaseMs: 10_000 });
    // An administrator took the balance to 150 and the key to 120; the follow-up write to the store failed.
    ledger.user = { balance: 150, version: 2 };
    ledger.key = { balance: 120, version: 5 };
    expect(await store.available({ userId: 1, keyId: 7 })).toEqual({ user: 900, key: 500 });
    await rec.runOnce();
    expect(await store.available({ userId: 1, keyId: 7 })).toEqual({ user: 50, key: 20 });
    const more = await store.reserve({ userId: 1, keyId: 7, amount: 100, ref: 'b', leaseMs: 10_000 });
    expect(more).toMatchObject({ ok: false, reason: 'short', scope: 'user', available: 50 });
    // Only ever a newer version: an older ledger read does not move the mirror back.
    ledger.user = { balance: 5_000, version: 1 };
    await rec.runOnce();
    expect((await store.available({ userId: 1 })).user).toBe(50);
  });
});
