import { expect, test } from 'bun:test';
import { LiveHolds } from './live-holds';
import { MemoryHoldStore } from './memory';

test('tracked holds are renewed every lease/3 and never lapse; an untracked one lapses into limbo', async () => {
  const store = new MemoryHoldStore(async () => ({ user: { balance: 100, version: 1 }, key: null }));
  const live = new LiveHolds(store, 150);
  try {
    const a = await store.reserve({ userId: 1, amount: 10, ref: 'a', leaseMs: 150 });
    const b = await store.reserve({ userId: 1, amount: 20, ref: 'b', leaseMs: 150 });
    if (!a.ok || !b.ok) throw new Error('reserve failed');
    live.track(a.hold);
    live.track(b.hold);
    live.untrack(b.hold);
    expect(live.size).toBe(1);
    await Bun.sleep(450);
    expect((await store.expired()).map((h) => h.ref)).toEqual(['b']);
  } finally {
    live.close();
  }
});
