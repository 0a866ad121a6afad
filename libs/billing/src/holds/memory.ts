import { safeCount } from '@gw/core';
import { budgetAvailable, budgetNewer, normalizeReserve, shortfall, type AfterCommit, type BudgetLoader, type BudgetMirror, type BudgetScope, type Hold, type HoldStore, type HoldTarget, type Mirror, type MirrorLoader, type ReserveRequest, type ReserveResult } from './port';

interface Account {
  mirror: Mirror | null;
  held: number;
  /** An update that found no mirror (after a data loss): the load that creates one takes the newer. */
  noted?: Mirror;
}

/** A budget's committed spend (null until loaded) and what holds count against it. */
interface BudgetAccount {
  mirror: { periodKey: string; spent: number } | null;
  held: number;
  noted?: { periodKey: string; spent: number };
}

interface Entry {
  hold: Hold;
  expiresAt: number;
  limbo: boolean;
}

/**
 * The single-node HoldStore: the same numbers as QuotaService's reservations (held per user and
 * per limited key, refusal when amount > available or available ≤ 0, charge capped at the hold
 * plus what is left), with leases and limbo so it behaves like the Redis store. Nothing here can
 * be lost short of the process itself, so it never answers `unavailable`.
 */
export class MemoryHoldStore implements HoldStore {
  private readonly users = new Map<number, Account>();
  private readonly keys = new Map<number, Account>();
  private readonly budgets = new Map<number, BudgetAccount>();
  private readonly holds = new Map<string, Entry>();
  /** One load per missing mirror at a time, like one script round trip would be. */
  private readonly loading = new Map<string, Promise<void>>();

  constructor(private readonly load: MirrorLoader, private readonly now: () => number = Date.now, private readonly loadBudgets: BudgetLoader = async () => []) {}

  async reserve(input: ReserveRequest): Promise<ReserveResult> {
    const req = normalizeReserve(input);
    const keyId = req.keyId ?? null;
    if (this.holds.has(req.ref)) return { ok: true, hold: this.holds.get(req.ref)!.hold };
    if (!this.mirrored(req.userId, keyId)) await this.loadMirrors(req.userId, keyId);
    const scopes = req.budgets ?? [];
    const missing = scopes.filter((b) => !this.budgets.get(b.id)?.mirror).map((b) => b.id);
    if (missing.length) await this.loadBudgetMirrors(missing);
    const user = this.account(this.users, req.userId);
    const userAvail = user.mirror ? user.mirror.balance - user.held : 0;
    const userShort = shortfall(req.amount, userAvail);
    if (userShort !== null) return { ok: false, reason: 'short', scope: 'user', available: Math.max(0, userAvail), shortBy: userShort };
    const key = keyId === null ? null : this.account(this.keys, keyId);
    if (key) {
      const keyAvail = key.mirror ? key.mirror.balance - key.held : 0;
      const keyShort = shortfall(req.amount, keyAvail);
      if (keyShort !== null) return { ok: false, reason: 'short', scope: 'key', available: Math.max(0, keyAvail), shortBy: keyShort };
    }
    for (const b of scopes) {
      const acct = this.budgetAccount(b.id);
      const avail = budgetAvailable(b, acct.mirror!, acct.held);
      const short = shortfall(req.amount, avail);
      if (short !== null) return { ok: false, reason: 'short', scope: 'budget', budgetId: b.id, available: Math.max(0, avail), shortBy: short };
    }
    if (key) key.held += req.amount;
    for (const b of scopes) this.budgetAccount(b.id).held += req.amount;
    user.held += req.amount;
    const hold: Hold = { ref: req.ref, userId: req.userId, keyId, amount: req.amount, ...(scopes.length ? { budgetIds: scopes.map((b) => b.id) } : {}) };
    this.holds.set(req.ref, { hold, expiresAt: this.now() + req.leaseMs, limbo: false });
    return { ok: true, hold };
  }

  async settle(hold: Hold, input: number, budgets: BudgetScope[] = []): Promise<number | null> {
    const cost = safeCount(input);
    const e = this.holds.get(hold.ref);
    if (!e) return null;
    const amount = e.hold.amount;
    const user = this.account(this.users, hold.userId);
    let cap = amount + Math.max(0, (user.mirror?.balance ?? 0) - user.held);
    const key = hold.keyId === null ? null : this.account(this.keys, hold.keyId);
    if (key?.mirror) cap = Math.min(cap, amount + Math.max(0, key.mirror.balance - key.held));
    const ids = e.hold.budgetIds ?? [];
    for (const b of budgets) {
      const acct = this.budgets.get(b.id);
      if (ids.includes(b.id) && acct?.mirror) cap = Math.min(cap, amount + Math.max(0, budgetAvailable(b, acct.mirror, acct.held)));
    }
    const charged = Math.min(cost, cap);
    user.held += charged - amount;
    if (key) key.held += charged - amount;
    for (const id of ids) this.budgetAccount(id).held += charged - amount;
    e.hold.amount = charged;
    hold.amount = charged;
    return charged;
  }

  async release(hold: Hold, after?: AfterCommit): Promise<void> {
    const e = this.holds.get(hold.ref);
    if (e) {
      this.holds.delete(hold.ref);
      this.account(this.users, hold.userId).held -= e.hold.amount;
      if (hold.keyId !== null) this.account(this.keys, hold.keyId).held -= e.hold.amount;
      for (const id of e.hold.budgetIds ?? []) this.budgetAccount(id).held -= e.hold.amount;
    }
    for (const m of after?.budgets ?? []) {
      const acct = this.budgets.get(m.id);
      if (acct) installBudget(acct, m, false);
    }
    // Only over an account that exists (as a Redis hash would): a hold put back, or a mirror.
    const user = this.users.get(hold.userId);
    const key = hold.keyId === null ? undefined : this.keys.get(hold.keyId);
    if (after?.user && user) install(user, after.user, false);
    if (after?.key && key) install(key, after.key, false);
  }

  async renew(holds: Hold[], leaseMs: number): Promise<number> {
    const t = this.now();
    let registered = 0;
    for (const hold of holds) {
      const e = this.holds.get(hold.ref);
      if (e) {
        e.expiresAt = t + leaseMs;
        e.limbo = false;
        continue;
      }
      this.holds.set(hold.ref, { hold: { ...hold }, expiresAt: t + leaseMs, limbo: false });
      this.account(this.users, hold.userId).held += hold.amount;
      if (hold.keyId !== null) this.account(this.keys, hold.keyId).held += hold.amount;
      for (const id of hold.budgetIds ?? []) this.budgetAccount(id).held += hold.amount;
      registered++;
    }
    return registered;
  }

  async applyBalance(target: HoldTarget, mirror: Mirror, opts: { ifPresent?: boolean } = {}): Promise<boolean> {
    const [m, id] = target.keyId == null ? [this.users, target.userId] : [this.keys, target.keyId];
    if (opts.ifPresent) {
      const acct = m.get(id);
      return acct ? install(acct, mirror, false) : false;
    }
    return install(this.account(m, id), mirror, true);
  }

  async applyBudget(_userId: number, mirror: BudgetMirror): Promise<boolean> {
    const acct = this.budgets.get(mirror.id);
    return acct ? installBudget(acct, mirror, false) : false;
  }

  async budgetUsage(_userId: number, id: number): Promise<{ periodKey: string; spent: number; held: number } | null> {
    const a = this.budgets.get(id);
    return a?.mirror ? { ...a.mirror, held: a.held } : null;
  }

  async available(target: HoldTarget): Promise<{ user: number | null; key: number | null }> {
    const avail = (a: Account | undefined) => (a?.mirror ? a.mirror.balance - a.held : null);
    return { user: avail(this.users.get(target.userId)), key: target.keyId == null ? null : avail(this.keys.get(target.keyId)) };
  }

  async expired(): Promise<Hold[]> {
    const t = this.now();
    const out: Hold[] = [];
    for (const e of this.holds.values()) {
      if (!e.limbo && e.expiresAt <= t) e.limbo = true;
      if (e.limbo) out.push({ ...e.hold });
    }
    return out;
  }

  async holders(): Promise<number[]> {
    return [...new Set([...this.holds.values()].map((e) => e.hold.userId))];
  }

  private mirrored(userId: number, keyId: number | null): boolean {
    return !!this.users.get(userId)?.mirror && (keyId === null || !!this.keys.get(keyId)?.mirror);
  }

  private loadMirrors(userId: number, keyId: number | null): Promise<void> {
    const id = `${userId}:${keyId}`;
    let p = this.loading.get(id);
    if (!p) {
      p = this.load(userId, keyId)
        .then((m) => {
          if (m.user) install(this.account(this.users, userId), m.user, true);
          if (m.key && keyId !== null) install(this.account(this.keys, keyId), m.key, true);
        })
        .finally(() => this.loading.delete(id));
      this.loading.set(id, p);
    }
    return p;
  }

  private async loadBudgetMirrors(ids: number[]): Promise<void> {
    const found = new Map((await this.loadBudgets(ids)).map((m) => [m.id, m]));
    // A budget the ledger no longer has spent nothing: it is admitted against its limit until the book drops it.
    for (const id of ids) installBudget(this.budgetAccount(id), found.get(id) ?? { id, periodKey: '', spent: 0 }, true);
  }

  private budgetAccount(id: number): BudgetAccount {
    let a = this.budgets.get(id);
    if (!a) this.budgets.set(id, (a = { mirror: null, held: 0 }));
    return a;
  }

  private account(m: Map<number, Account>, id: number): Account {
    let a = m.get(id);
    if (!a) m.set(id, (a = { mirror: null, held: 0 }));
    return a;
  }
}

/** `create`: whether a missing mirror may be installed (only admission's load creates one, as in Redis). */
function install(a: Account, m: Mirror, create: boolean): boolean {
  if (!a.mirror && !create) {
    if (!a.noted || a.noted.version < m.version) a.noted = { ...m };
    return false;
  }
  if (!a.mirror && a.noted) {
    if (a.noted.version > m.version) m = a.noted;
    a.noted = undefined;
  }
  if (a.mirror && a.mirror.version >= m.version) return false;
  a.mirror = { ...m };
  return true;
}

/** As install(), ordered by (period, spent) instead of a version. */
function installBudget(a: BudgetAccount, m: { periodKey: string; spent: number }, create: boolean): boolean {
  const next = { periodKey: m.periodKey, spent: m.spent };
  if (!a.mirror && !create) {
    if (budgetNewer(next, a.noted)) a.noted = next;
    return false;
  }
  if (!a.mirror && a.noted) {
    if (budgetNewer(a.noted, next)) Object.assign(next, a.noted);
    a.noted = undefined;
  }
  if (!budgetNewer(next, a.mirror ?? undefined)) return false;
  a.mirror = next;
  return true;
}
