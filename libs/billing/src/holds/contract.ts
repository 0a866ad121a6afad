/**
 * The HoldStore contract, run against every implementation. A "cluster" is one shared store seen
 * by several nodes (for Redis: separate connections); the loader plays the ledger.
 */
import { describe, expect, test } from 'bun:test';
import type { BudgetLoader, BudgetMirror, BudgetScope, HoldStore, Mirror, MirrorLoader } from './port';

export interface HoldStoreFactory {
  cluster(load: MirrorLoader, loadBudgets: BudgetLoader): { node(): HoldStore };
}

/** A ledger double: balances by user and limited key, counting loads. */
class Ledger {
  readonly users = new Map<number, Mirror>();
  readonly keys = new Map<number, Mirror>();
  readonly budgets = new Map<number, BudgetMirror>();
  loads = 0;
  budgetLoads = 0;
  readonly loadBudgets: BudgetLoader = async (ids) => {
    this.budgetLoads++;
    await Bun.sleep(1);
    return ids.flatMap((i) => (this.budgets.has(i) ? [this.budgets.get(i)!] : []));
  };
  readonly load: MirrorLoader = async (userId, keyId) => {
    this.loads++;
    await Bun.sleep(1);
    return { user: this.users.get(userId) ?? null, key: keyId === null ? null : (this.keys.get(keyId) ?? null) };
  };
}

let seq = 1000 + Math.floor(Math.random() * 1_000_000);
const id = () => ++seq;
const ref = () => `req-${id()}`;
const LEASE = 30_000;

function setup(f: HoldStoreFactory) {
  const ledger = new Ledger();
  const c = f.cluster(ledger.load, ledger.loadBudgets);
  return { ledger, store: c.node(), node: () => c.node() };
}

export function holdStoreContract(f: HoldStoreFactory): void {
  test('a missing mirror is loaded once, then admissions are checked against balance − held', async () => {
    const { ledger, store } = setup(f);
    const u = id();
    ledger.users.set(u, { balance: 100, version: 1 });
    const a = await store.reserve({ userId: u, amount: 60, ref: ref(), leaseMs: LEASE });
    expect(a.ok).toBe(true);
    expect(ledger.loads).toBe(1);
    const b = await store.reserve({ userId: u, amount: 50, ref: ref(), leaseMs: LEASE });
    expect(b).toEqual({ ok: false, reason: 'short', scope: 'user', available: 40, shortBy: 10 });
    expect(await store.available({ userId: u })).toEqual({ user: 40, key: null });
    if (!a.ok) throw new Error('reserve failed');
    await store.release(a.hold);
    await store.release(a.hold);
    expect((await store.reserve({ userId: u, amount: 50, ref: ref(), leaseMs: LEASE })).ok).toBe(true);
    expect(ledger.loads).toBe(1);
  });

  test('refuses like QuotaService: nothing available refuses even a zero amount; unknown users have nothing', async () => {
    const { ledger, store } = setup(f);
    const u = id();
    ledger.users.set(u, { balance: 0, version: 1 });
    expect(await store.reserve({ userId: u, amount: 0, ref: ref(), leaseMs: LEASE })).toMatchObject({ ok: false, scope: 'user', available: 0 });
    expect(await store.reserve({ userId: id(), amount: 5, ref: ref(), leaseMs: LEASE })).toMatchObject({ ok: false, scope: 'user', available: 0, shortBy: 5 });
  });

  test('amounts are taken as QuotaService takes them: fractions round up, NaN and negatives are 0', async () => {
    const { ledger, store } = setup(f);
    const u = id();
    ledger.users.set(u, { balance: 10, version: 1 });
    const r = await store.reserve({ userId: u, amount: 2.5, ref: ref(), leaseMs: LEASE });
    if (!r.ok) throw new Error('reserve failed');
    expect(r.hold.amount).toBe(3);
    expect(await store.settle(r.hold, Number.NaN)).toBe(0);
    expect(await store.settle(r.hold, -5)).toBe(0);
    expect(await store.settle(r.hold, 1.2)).toBe(2);
    expect(await store.available({ userId: u })).toEqual({ user: 8, key: null });
  });

  test('a limited key is held atomically with its user', async () => {
    const { ledger, store } = setup(f);
    const [u, k] = [id(), id()];
    ledger.users.set(u, { balance: 1000, version: 1 });
    ledger.keys.set(k, { balance: 30, version: 1 });
    expect(await store.reserve({ userId: u, keyId: k, amount: 40, ref: ref(), leaseMs: LEASE })).toEqual({ ok: false, reason: 'short', scope: 'key', available: 30, shortBy: 10 });
    // The refused key reservation held nothing on the user either.
    expect(await store.available({ userId: u, keyId: k })).toEqual({ user: 1000, key: 30 });
    const ok = await store.reserve({ userId: u, keyId: k, amount: 30, ref: ref(), leaseMs: LEASE });
    expect(ok.ok).toBe(true);
    expect(await store.available({ userId: u, keyId: k })).toEqual({ user: 970, key: 0 });
    expect((await store.reserve({ userId: u, keyId: k, amount: 1, ref: ref(), leaseMs: LEASE })).ok).toBe(false);
    expect((await store.reserve({ userId: u, amount: 900, ref: ref(), leaseMs: LEASE })).ok).toBe(true);
  });

  test('mirrors are only replaced by newer versions', async () => {
    const { store } = setup(f);
    const u = id();
    expect(await store.applyBalance({ userId: u }, { balance: 200, version: 5 })).toBe(true);
    expect(await store.applyBalance({ userId: u }, { balance: 999, version: 4 })).toBe(false);
    expect(await store.applyBalance({ userId: u }, { balance: 999, version: 5 })).toBe(false);
    expect(await store.available({ userId: u })).toEqual({ user: 200, key: null });
    expect(await store.applyBalance({ userId: u }, { balance: 150, version: 6 })).toBe(true);
    expect(await store.available({ userId: u })).toEqual({ user: 150, key: null });
  });

  test('release and applyBalance(ifPresent) only move an existing mirror: only admission creates one (after a data loss, through the recovery window)', async () => {
    const { ledger, store } = setup(f);
    const u = id();
    const k = id();
    expect(await store.applyBalance({ userId: u }, { balance: 500, version: 3 }, { ifPresent: true })).toBe(false);
    await store.release({ ref: ref(), userId: u, keyId: k, amount: 10 }, { user: { balance: 500, version: 3 }, key: { balance: 500, version: 3 } });
    expect(await store.available({ userId: u, keyId: k })).toEqual({ user: null, key: null });
    ledger.users.set(u, { balance: 100, version: 1 });
    const a = await store.reserve({ userId: u, amount: 60, ref: ref(), leaseMs: LEASE });
    expect(a.ok).toBe(true);
    expect(await store.applyBalance({ userId: u }, { balance: 300, version: 2 }, { ifPresent: true })).toBe(true);
    expect(await store.available({ userId: u })).toEqual({ user: 240, key: null });
  });

  test('settle turns the hold into the charge, capped at hold + what is left; release installs the post-commit balance in the same step', async () => {
    const { ledger, store } = setup(f);
    const [u, k] = [id(), id()];
    ledger.users.set(u, { balance: 100, version: 1 });
    ledger.keys.set(k, { balance: 100, version: 1 });
    const a = await store.reserve({ userId: u, keyId: k, amount: 10, ref: ref(), leaseMs: LEASE });
    const b = await store.reserve({ userId: u, amount: 85, ref: ref(), leaseMs: LEASE });
    if (!a.ok || !b.ok) throw new Error('reserve failed');
    // Upstream reported more than reserved: only 100 − 95 = 5 more can be charged.
    expect(await store.settle(a.hold, 50)).toBe(15);
    expect(a.hold.amount).toBe(15);
    expect(await store.available({ userId: u, keyId: k })).toEqual({ user: 0, key: 85 });
    expect(await store.settle(b.hold, 20)).toBe(20);
    expect(await store.available({ userId: u })).toMatchObject({ user: 65 });
    // The ledger commits a's 15 (version 2): dropping the hold and installing 85 happen together.
    await store.release(a.hold, { user: { balance: 85, version: 2 }, key: { balance: 85, version: 2 } });
    expect(await store.available({ userId: u, keyId: k })).toEqual({ user: 65, key: 85 });
    await store.release(a.hold, { user: { balance: 85, version: 2 } });
    expect(await store.available({ userId: u, keyId: k })).toEqual({ user: 65, key: 85 });
    expect(await store.settle(a.hold, 1)).toBeNull();
    await store.release(b.hold, { user: { balance: 65, version: 3 } });
    expect(await store.available({ userId: u })).toEqual({ user: 65, key: null });
  });

  test('a lapsed lease moves to limbo and still counts until released; renewed leases stay out of limbo', async () => {
    const { ledger, store } = setup(f);
    const u = id();
    ledger.users.set(u, { balance: 100, version: 1 });
    const dead = await store.reserve({ userId: u, amount: 60, ref: ref(), leaseMs: 150 });
    const live = await store.reserve({ userId: u, amount: 10, ref: ref(), leaseMs: 150 });
    if (!dead.ok || !live.ok) throw new Error('reserve failed');
    for (let i = 0; i < 5; i++) {
      await Bun.sleep(60);
      expect(await store.renew([live.hold], 150)).toBe(0);
    }
    const limbo = await store.expired();
    expect(limbo.filter((h) => h.userId === u)).toEqual([{ ref: dead.hold.ref, userId: u, keyId: null, amount: 60 }]);
    expect((await store.reserve({ userId: u, amount: 31, ref: ref(), leaseMs: LEASE })).ok).toBe(false);
    // The reconciler found the request unbilled: releasing with the ledger's truth frees it.
    await store.release(limbo.find((h) => h.userId === u)!, { user: { balance: 100, version: 1 } });
    expect((await store.expired()).filter((h) => h.userId === u)).toEqual([]);
    expect((await store.reserve({ userId: u, amount: 90, ref: ref(), leaseMs: LEASE })).ok).toBe(true);
    await store.release(live.hold);
  });

  test('holders() lists a user with a hold (also one in limbo) from any node', async () => {
    const { ledger, store, node } = setup(f);
    const u = id();
    ledger.users.set(u, { balance: 100, version: 1 });
    const r = await store.reserve({ userId: u, amount: 10, ref: ref(), leaseMs: 100 });
    if (!r.ok) throw new Error('reserve failed');
    expect(await node().holders()).toContain(u);
    await Bun.sleep(150);
    await store.expired();
    expect(await node().holders()).toContain(u);
    await store.release(r.hold);
  });

  test('after a data loss, a commit released before the first load is not undone by that load\'s older read', async () => {
    const { store } = setup(f);
    const u = id();
    // Redis came back empty: the node's renewal put its hold back, no mirror yet.
    const hold = { ref: ref(), userId: u, keyId: null, amount: 40 };
    expect(await store.renew([hold], LEASE)).toBe(1);
    // An admission read the ledger (100, version 1) to load the mirror; before it installs it, the hold's
    // request commits 40 (60, version 2) and its release drops the hold.
    await store.release(hold, { user: { balance: 60, version: 2 } });
    expect(await store.applyBalance({ userId: u }, { balance: 100, version: 1 })).toBe(true);
    // Was 100: the charge counted neither in the balance nor as a hold.
    expect(await store.available({ userId: u })).toEqual({ user: 60, key: null });
  });

  test('renew registers a hold the store no longer has (lost data), and it counts again', async () => {
    const { ledger, store } = setup(f);
    const [u, k] = [id(), id()];
    ledger.users.set(u, { balance: 100, version: 1 });
    ledger.keys.set(k, { balance: 50, version: 1 });
    const r = await store.reserve({ userId: u, keyId: k, amount: 40, ref: ref(), leaseMs: LEASE });
    if (!r.ok) throw new Error('reserve failed');
    await store.release(r.hold);
    expect(await store.renew([r.hold], LEASE)).toBe(1);
    expect(await store.available({ userId: u, keyId: k })).toEqual({ user: 60, key: 10 });
    expect(await store.renew([r.hold], LEASE)).toBe(0);
    expect(await store.available({ userId: u, keyId: k })).toEqual({ user: 60, key: 10 });
  });

  test('300 concurrent reserves from three nodes for a balance funding exactly 100: exactly 100 pass', async () => {
    const { ledger, node } = setup(f);
    const [u, k] = [id(), id()];
    ledger.users.set(u, { balance: 700, version: 1 });
    const nodes = [node(), node(), node()];
    const results = await Promise.all(Array.from({ length: 300 }, (_, i) => nodes[i % 3]!.reserve({ userId: u, amount: 7, ref: ref(), leaseMs: LEASE })));
    expect(results.filter((r) => r.ok).length).toBe(100);
    expect(await nodes[1]!.available({ userId: u })).toEqual({ user: 0, key: null });
    // The same through a limited key funding 100 of a larger balance.
    const u2 = id();
    ledger.users.set(u2, { balance: 10_000, version: 1 });
    ledger.keys.set(k, { balance: 700, version: 1 });
    const viaKey = await Promise.all(Array.from({ length: 300 }, (_, i) => nodes[i % 3]!.reserve({ userId: u2, keyId: k, amount: 7, ref: ref(), leaseMs: LEASE })));
    expect(viaKey.filter((r) => r.ok).length).toBe(100);
    expect(await nodes[2]!.available({ userId: u2, keyId: k })).toEqual({ user: 9_300, key: 0 });
  });

  describe('budgets', () => {
    const PK = '2026-11-24';
    const scope = (b: number, limit: number, periodKey = PK): BudgetScope => ({ id: b, limit, periodKey });

    test('a budget is held like a balance: limit − spent this period − held; a refusal holds nothing anywhere', async () => {
      const { ledger, store } = setup(f);
      const [u, b] = [id(), id()];
      ledger.users.set(u, { balance: 10_000, version: 1 });
      ledger.budgets.set(b, { id: b, periodKey: PK, spent: 30 });
      expect(await store.reserve({ userId: u, amount: 80, ref: ref(), leaseMs: LEASE, budgets: [scope(b, 100)] }))
        .toEqual({ ok: false, reason: 'short', scope: 'budget', budgetId: b, available: 70, shortBy: 10 });
      expect(await store.available({ userId: u })).toEqual({ user: 10_000, key: null });
      const a = await store.reserve({ userId: u, amount: 70, ref: ref(), leaseMs: LEASE, budgets: [scope(b, 100)] });
      if (!a.ok) throw new Error('reserve failed');
      expect(a.hold.budgetIds).toEqual([b]);
      expect(await store.budgetUsage(u, b)).toEqual({ periodKey: PK, spent: 30, held: 70 });
      expect(await store.reserve({ userId: u, amount: 0, ref: ref(), leaseMs: LEASE, budgets: [scope(b, 100)] })).toMatchObject({ ok: false, scope: 'budget', available: 0 });
      // A limit raised by the operator (the node's book) admits at once; the mirror was loaded once.
      expect((await store.reserve({ userId: u, amount: 50, ref: ref(), leaseMs: LEASE, budgets: [scope(b, 150)] })).ok).toBe(true);
      expect(ledger.budgetLoads).toBe(1);
      await store.release(a.hold);
      expect(await store.budgetUsage(u, b)).toEqual({ periodKey: PK, spent: 30, held: 50 });
    });

    test('an earlier period\'s spend is none; a later one (a node whose clock is behind) counts; a budget the ledger lost spent nothing', async () => {
      const { ledger, store } = setup(f);
      const [u, old, later, gone] = [id(), id(), id(), id()];
      ledger.users.set(u, { balance: 10_000, version: 1 });
      ledger.budgets.set(old, { id: old, periodKey: '2026-11-23', spent: 100 });
      ledger.budgets.set(later, { id: later, periodKey: '2026-11-25', spent: 90 });
      expect((await store.reserve({ userId: u, amount: 100, ref: ref(), leaseMs: LEASE, budgets: [scope(old, 100)] })).ok).toBe(true);
      expect(await store.reserve({ userId: u, amount: 20, ref: ref(), leaseMs: LEASE, budgets: [scope(later, 100)] })).toMatchObject({ ok: false, scope: 'budget', available: 10 });
      expect((await store.reserve({ userId: u, amount: 100, ref: ref(), leaseMs: LEASE, budgets: [scope(gone, 100)] })).ok).toBe(true);
    });

    test('spend mirrors only move forward (a later period, or more spend in one); release and applyBudget only over an existing mirror', async () => {
      const { ledger, store } = setup(f);
      const [u, b] = [id(), id()];
      ledger.users.set(u, { balance: 10_000, version: 1 });
      expect(await store.applyBudget(u, { id: b, periodKey: PK, spent: 5 })).toBe(false);
      ledger.budgets.set(b, { id: b, periodKey: PK, spent: 10 });
      const a = await store.reserve({ userId: u, amount: 40, ref: ref(), leaseMs: LEASE, budgets: [scope(b, 100)] });
      if (!a.ok) throw new Error('reserve failed');
      // Its charge of 40 commits: hold dropped and spend 50 installed in one step.
      await store.release(a.hold, { budgets: [{ id: b, periodKey: PK, spent: 50 }] });
      expect(await store.budgetUsage(u, b)).toEqual({ periodKey: PK, spent: 50, held: 0 });
      // An older read (another node's earlier commit, delivered late) is ignored.
      expect(await store.applyBudget(u, { id: b, periodKey: PK, spent: 20 })).toBe(false);
      expect(await store.applyBudget(u, { id: b, periodKey: '2026-11-23', spent: 99 })).toBe(false);
      expect(await store.budgetUsage(u, b)).toMatchObject({ spent: 50 });
      expect(await store.applyBudget(u, { id: b, periodKey: '2026-11-25', spent: 7 })).toBe(true);
      expect(await store.budgetUsage(u, b)).toMatchObject({ periodKey: '2026-11-25', spent: 7 });
    });

    test('settle caps a charge at the hold plus what the budget can still admit; the hold\'s budgets move with it', async () => {
      const { ledger, store } = setup(f);
      const [u, b] = [id(), id()];
      ledger.users.set(u, { balance: 10_000, version: 1 });
      ledger.budgets.set(b, { id: b, periodKey: PK, spent: 0 });
      const a = await store.reserve({ userId: u, amount: 10, ref: ref(), leaseMs: LEASE, budgets: [scope(b, 100)] });
      const c = await store.reserve({ userId: u, amount: 60, ref: ref(), leaseMs: LEASE, budgets: [scope(b, 100)] });
      if (!a.ok || !c.ok) throw new Error('reserve failed');
      // 100 − 70 held: a may grow by 30 at most.
      expect(await store.settle(a.hold, 500, [scope(b, 100)])).toBe(40);
      expect(await store.budgetUsage(u, b)).toMatchObject({ held: 100 });
      // A budget the node no longer has (cleared meanwhile) does not cap, but its holds still move.
      expect(await store.settle(c.hold, 70, [])).toBe(70);
      expect(await store.budgetUsage(u, b)).toMatchObject({ held: 110 });
      await store.release(a.hold);
      await store.release(c.hold);
      expect(await store.budgetUsage(u, b)).toMatchObject({ held: 0 });
    });

    test('a lapsed hold keeps its budgets in limbo; renew after a data loss puts them back', async () => {
      const { ledger, store } = setup(f);
      const [u, b] = [id(), id()];
      ledger.users.set(u, { balance: 10_000, version: 1 });
      ledger.budgets.set(b, { id: b, periodKey: PK, spent: 0 });
      const dead = await store.reserve({ userId: u, amount: 60, ref: ref(), leaseMs: 100, budgets: [scope(b, 100)] });
      if (!dead.ok) throw new Error('reserve failed');
      await Bun.sleep(150);
      const limbo = (await store.expired()).filter((h) => h.userId === u);
      expect(limbo).toEqual([{ ref: dead.hold.ref, userId: u, keyId: null, amount: 60, budgetIds: [b] }]);
      expect(await store.reserve({ userId: u, amount: 41, ref: ref(), leaseMs: LEASE, budgets: [scope(b, 100)] })).toMatchObject({ ok: false, scope: 'budget' });
      await store.release(limbo[0]!, { budgets: [{ id: b, periodKey: PK, spent: 60 }] });
      expect(await store.budgetUsage(u, b)).toEqual({ periodKey: PK, spent: 60, held: 0 });
      // Lost and renewed: the hold counts on its budget again.
      expect(await store.renew([{ ...dead.hold, ref: ref() }], LEASE)).toBe(1);
      expect(await store.budgetUsage(u, b)).toMatchObject({ held: 60 });
    });

    test('300 concurrent reserves from three nodes against a budget funding exactly 100 (a key budget and a user budget): exactly 100 pass', async () => {
      const { ledger, node } = setup(f);
      const [u, kb, ub] = [id(), id(), id()];
      ledger.users.set(u, { balance: 1_000_000, version: 1 });
      ledger.budgets.set(kb, { id: kb, periodKey: PK, spent: 0 });
      ledger.budgets.set(ub, { id: ub, periodKey: PK, spent: 300 });
      const nodes = [node(), node(), node()];
      const results = await Promise.all(Array.from({ length: 300 }, (_, i) => nodes[i % 3]!.reserve({
        userId: u, amount: 7, ref: ref(), leaseMs: LEASE, budgets: [scope(kb, 1000), scope(ub, 1000)],
      })));
      expect(results.filter((r) => r.ok).length).toBe(100);
      expect(await nodes[1]!.budgetUsage(u, ub)).toEqual({ periodKey: PK, spent: 300, held: 700 });
      expect(await nodes[2]!.budgetUsage(u, kb)).toEqual({ periodKey: PK, spent: 0, held: 700 });
      expect(await nodes[0]!.available({ userId: u })).toEqual({ user: 1_000_000 - 700, key: null });
    });
  });
}
