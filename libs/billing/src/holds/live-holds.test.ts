import { expect, test } from 'bun:test';
import { LiveHolds } from './live-holds';
import { MemoryHoldStore } from './memory';

test('tracked holds are renewed every lease/3 and never lapse; an untracked one lapses into limbo', async () => {
  const store = new MemoryHoldStore(async () => ({ user: { balance: 100, version: 1 }, key: null }));
  // Renewed every lease/3: with a 150 ms lease, one renewal 100 ms late (a loaded machine, a GC pause) let the tracked
  // hold lapse too. 300 ms leaves 200 ms; the sleep still spans three leases.
  const live = new LiveHolds(store, 300);
  try {
    const a = await store.reserve({ userId: 1, amount: 10, ref: 'a', leaseMs: 300 });
    const b = await store.reserve({ userId: 1, amount: 20, ref: 'b', leaseMs: 300 });
    if (!a.ok || !b.ok) throw new Error('reserve failed');
    live.track(a.hold);
    live.track(b.hold);
    live.untrack(b.hold);
    expect(live.size).toBe(1);
    await Bun.sleep(900);
    expect((await store.expired()).map((h) => h.ref)).toEqual(['b']);
  } finally {
    live.close();
  }
});

test('renewals failing for half a lease call onLost once, before any hold can lapse; a renewal that works again re-arms it', async () => {
  const store = new MemoryHoldStore(async () => ({ user: { balance: 100, version: 1 }, key: null }));
  let down = false;
  const renew = store.renew.bind(store);
  store.renew = (holds, leaseMs) => (down ? Promise.reject(new Error('redis unreachable (test)')) : renew(holds, leaseMs));
  const lost: number[] = [];
  let errors = 0;
  const t0 = performance.now();
  const live = new LiveHolds(store, 300, () => { errors++; }, () => { lost.push(performance.now() - t0); });
  try {
    const a = await store.reserve({ userId: 1, amount: 10, ref: 'a', leaseMs: 300 });
    if (!a.ok) throw new Error('reserve failed');
    live.track(a.hold);
    await Bun.sleep(350);
    expect(lost).toEqual([]); // renewals work: never fenced
    down = true;
    const cut = performance.now() - t0;
    await Bun.sleep(600);
    expect(errors).toBeGreaterThan(1);
    expect(lost).toHaveLength(1);
    // At most half a lease plus one renewal interval after the last renewal that worked: the hold, renewed
    // then for a whole lease, is still counted everywhere when the node stops its requests.
    expect(lost[0]! - cut).toBeLessThan(300);
    down = false;
    await Bun.sleep(250);
    down = true;
    await Bun.sleep(500);
    expect(lost).toHaveLength(2);
  } finally {
    live.close();
  }
});

test('no holds in flight: nothing to protect, never fenced while Redis is away', async () => {
  const store = new MemoryHoldStore(async () => ({ user: { balance: 100, version: 1 }, key: null }));
  store.renew = () => Promise.reject(new Error('redis unreachable (test)'));
  let lost = 0;
  const live = new LiveHolds(store, 150, () => {}, () => { lost++; });
  try {
    await Bun.sleep(400);
    expect(lost).toBe(0);
  } finally {
    live.close();
  }
});

test('renewals answered are not retained: a node renewing for days keeps no trail of them', async () => {
  const store = new MemoryHoldStore(async () => ({ user: { balance: 100, version: 1 }, key: null }));
  store.renew = async () => 0;
  const live = new LiveHolds(store, 3_600_000);
  try {
    const a = await store.reserve({ userId: 1, amount: 10, ref: 'a', leaseMs: 3_600_000 });
    if (!a.ok) throw new Error('reserve failed');
    live.track(a.hold);
    const heap = () => { Bun.gc(true); return process.memoryUsage().heapUsed; };
    for (let i = 0; i < 1_000; i++) await live.renewNow();
    const before = heap();
    // Each renewal chained onto the last kept every answer before it reachable (about 100 bytes a renewal).
    for (let i = 0; i < 200_000; i++) await live.renewNow();
    expect(heap() - before).toBeLessThan(4_000_000);
    await live.release(a.hold);
  } finally {
    live.close();
  }
});
