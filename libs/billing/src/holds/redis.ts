import { safeCount } from '@gw/core';
import type { Redis } from 'ioredis';
import { defineScript, type Script } from '@gw/core/redis/script';
import { normalizeReserve, shortfall, type AfterCommit, type BudgetLoader, type BudgetMirror, type BudgetScope, type Hold, type HoldStore, type HoldTarget, type Mirror, type MirrorLoader, type ReserveRequest, type ReserveResult } from './port';
import * as lua from './redis-lua';

export interface RedisHoldStoreOptions {
  /** Prefix of every key (no braces: the hash tags are the store's). Default `gw:`. */
  prefix?: string;
  /**
   * After Redis comes back empty, how long admissions that need a mirror wait before loading one:
   * at least one renewal interval (lease/3) plus a round trip, so every live hold is back first.
   */
  recoveryMs?: number;
  /** Reads budgets' committed spend for missing mirrors (default: none known, nothing spent). */
  loadBudgets?: BudgetLoader;
}

type Exec = Array<[Error | null, unknown]>;

/**
 * Holds shared by every node: one script per operation; a user's keys share the hash tag
 * `{u:<id>}` (a limited key is stored under its owner's tag), so each script touches one slot.
 * Scripts take the time from the server, so node clocks do not matter.
 */
export class RedisHoldStore implements HoldStore {
  private readonly prefix: string;
  private readonly recoveryMs: number;
  private readonly loadBudgets: BudgetLoader;
  private readonly s: Record<'reserve' | 'settle' | 'release' | 'load' | 'apply' | 'bapply' | 'renew' | 'sweep' | 'touch' | 'forget' | 'epoch', Script>;
  /**
   * The connection dropped and is not back: money operations fail at once instead of waiting in ioredis's
   * offline queue for reconnect attempts (an admission answered 503 only after seconds; a stream's end
   * waited for its hold's settle and release). Before the first connection they queue as usual.
   */
  private lost = false;
  /**
   * performance.now() of this node's last index touch per user (reserve or renew). The touch sets the user's
   * index score to the server's now + lease, and a sweep forgets only a user whose score has passed, so
   * within half a lease of a touch a reserve needs none: one Redis command less per request. Forgotten
   * whenever Redis may have lost data (a reconnect, a mirror to load).
   */
  private readonly touched = new Map<number, number>();

  constructor(private readonly redis: Redis, private readonly load: MirrorLoader, opts: RedisHoldStoreOptions = {}) {
    redis.on('close', () => { this.lost = true; });
    redis.on('ready', () => { this.lost = false; this.touched.clear(); });
    this.prefix = opts.prefix ?? 'gw:';
    this.recoveryMs = opts.recoveryMs ?? 10_000;
    this.loadBudgets = opts.loadBudgets ?? (async () => []);
    // Scripts whose number of keys depends on the call (budgets, batches) take it first.
    this.s = {
      reserve: defineScript(redis, 'gwHoldReserve2', null, lua.RESERVE),
      settle: defineScript(redis, 'gwHoldSettle2', null, lua.SETTLE),
      release: defineScript(redis, 'gwHoldRelease2', null, lua.RELEASE),
      load: defineScript(redis, 'gwHoldLoad', null, lua.LOAD),
      apply: defineScript(redis, 'gwHoldApply', 1, lua.APPLY),
      bapply: defineScript(redis, 'gwHoldBudgetApply', 1, lua.BUDGET_APPLY),
      // The number of keys depends on the batch: passed first.
      renew: defineScript(redis, 'gwHoldRenew2', null, lua.RENEW),
      sweep: defineScript(redis, 'gwHoldSweep', 3, lua.SWEEP),
      touch: defineScript(redis, 'gwHoldIndexTouch', 1, lua.INDEX_TOUCH),
      forget: defineScript(redis, 'gwHoldIndexForget', 1, lua.INDEX_FORGET),
      epoch: defineScript(redis, 'gwHoldEpoch', 1, lua.EPOCH),
    };
  }

  private connected(): void {
    if (this.lost) throw new Error(`Redis connection lost (${this.redis.status})`);
  }

  private user(userId: number, part: string): string {
    return `${this.prefix}{u:${userId}}:${part}`;
  }

  private keyHash(userId: number, keyId: number | null): string {
    return this.user(userId, `k:${keyId ?? '-'}`);
  }

  /** A budget's hash, under the tag of the user who owns it (a key's budget: the key's owner). */
  private budgetHash(userId: number, budgetId: number): string {
    return this.user(userId, `b:${budgetId}`);
  }

  private get index(): string {
    return `${this.prefix}{holds}:users`;
  }

  async reserve(input: ReserveRequest): Promise<ReserveResult> {
    this.connected();
    const req = normalizeReserve(input);
    const keyId = req.keyId ?? null;
    const budgets = req.budgets ?? [];
    const keys = [this.user(req.userId, 'acct'), this.user(req.userId, 'holds'), this.user(req.userId, 'leases'), this.keyHash(req.userId, keyId),
      ...budgets.map((b) => this.budgetHash(req.userId, b.id))];
    const args = [req.ref, req.amount, req.leaseMs, keyId ?? '', budgets.map((b) => b.id).join(','), ...budgets.flatMap((b) => [b.limit, b.periodKey])];
    const budgetIds = budgets.length ? { budgetIds: budgets.map((b) => b.id) } : {};
    let budgetLoads = 0;
    let lostLoads = 0;
    for (let attempt = 0; ; attempt++) {
      const t = performance.now();
      const fresh = t - (this.touched.get(req.userId) ?? -Infinity) < req.leaseMs / 2;
      // Written back to back on one connection: one round trip, in this order.
      const [, r] = (await Promise.all([
        fresh ? null : this.s.touch([this.index], [req.userId, req.leaseMs]),
        this.s.reserve(counted(keys), args),
      ])) as [unknown, number[]];
      if (!fresh) this.touched.set(req.userId, t);
      if (r[0] === 1) return { ok: true, hold: { ref: req.ref, userId: req.userId, keyId, amount: r[1]!, ...budgetIds } };
      if (r[0] === 0 && r[1] === 3) {
        return { ok: false, reason: 'short', scope: 'budget', budgetId: budgets[r[3]! - 1]!.id, available: Math.max(0, r[2]!), shortBy: shortfall(req.amount, r[2]!)! };
      }
      const scope = r[1] === 1 ? 'user' : 'key';
      if (r[0] === 0) return { ok: false, reason: 'short', scope, available: Math.max(0, r[2]!), shortBy: shortfall(req.amount, r[2]!)! };
      // A budget's load always installs a mirror; one missing again was lost meanwhile (data loss).
      if (r[1] === 3 && ++budgetLoads > 2) return { ok: false, reason: 'unavailable', retryAfterMs: 1000 };
      // The loader found no such user or key: nothing to spend.
      if (attempt > 0 && r[1] !== 3) return { ok: false, reason: 'short', scope, available: 0, shortBy: Math.max(1, req.amount) };
      // A mirror to load: Redis may have lost its data, the index with it.
      this.touched.clear();
      const wait = await this.recoveryLeft();
      if (wait > 0) return { ok: false, reason: 'unavailable', retryAfterMs: wait };
      const [m, spent] = await Promise.all([
        r[1] === 3 ? null : this.load(req.userId, keyId),
        r[1] === 3 ? this.loadBudgets(budgets.map((b) => b.id)) : null,
      ]);
      const key = m?.key && keyId !== null ? m.key : null;
      const found = new Map((spent ?? []).map((b) => [b.id, b]));
      // A budget the ledger no longer has spent nothing: admitted against its limit until the book drops it.
      const budgetArgs = spent ? budgets.flatMap((b) => [found.get(b.id)?.periodKey ?? '', found.get(b.id)?.spent ?? 0]) : [];
      const installed = await this.s.load(counted([keys[0]!, keys[3]!, ...(spent ? keys.slice(4) : [])]),
        [String(r[2]) /* the load token (a string) */, m?.user?.balance ?? '', m?.user?.version ?? '', key?.balance ?? '', key?.version ?? '', ...budgetArgs]);
      // The token is gone: Redis lost its data while the ledger was read. The next pass asks the epoch again.
      if (Number(installed) === 0 && ++lostLoads > 2) return { ok: false, reason: 'unavailable', retryAfterMs: 1000 };
      // A missing budget mirror, or a load a data loss dropped, does not use up the user's retry.
      if (r[1] === 3 || Number(installed) === 0) attempt--;
    }
  }

  /**
   * Ms until mirrors may be loaded again (0 = now). Starts the recovery window if Redis has no epoch
   * (first use, or its data was lost): a node calls it at start so the window runs from then. `windowMs`
   * 0 opens a missing epoch at once: only for a start known to be the first ever (claimAdmissionStart),
   * when no hold can have been lost; an epoch already there keeps its own window.
   */
  async recoveryLeft(windowMs = this.recoveryMs): Promise<number> {
    return Number(await this.s.epoch([`${this.prefix}{epoch}`], [windowMs]));
  }

  async settle(hold: Hold, input: number, budgets: BudgetScope[] = []): Promise<number | null> {
    this.connected();
    const cost = safeCount(input);
    const ids = hold.budgetIds ?? [];
    const keys = [this.user(hold.userId, 'acct'), this.user(hold.userId, 'holds'), this.keyHash(hold.userId, hold.keyId), ...ids.map((id) => this.budgetHash(hold.userId, id))];
    const scopes = ids.flatMap((id) => {
      const b = budgets.find((x) => x.id === id);
      return b ? [b.limit, b.periodKey] : ['', ''];
    });
    const charged = Number(await this.s.settle(counted(keys), [hold.ref, cost, ...scopes]));
    if (charged < 0) return null;
    hold.amount = charged;
    return charged;
  }

  async release(hold: Hold, after?: AfterCommit): Promise<void> {
    this.connected();
    const u = hold.userId;
    // The hold's budgets (to drop what it holds there) and those whose spend the commit left.
    const spent = new Map<number, BudgetMirror | null>((hold.budgetIds ?? []).map((id) => [id, null]));
    for (const m of after?.budgets ?? []) spent.set(m.id, m);
    const keys = [this.user(u, 'acct'), this.user(u, 'holds'), this.user(u, 'leases'), this.user(u, 'limbo'), this.keyHash(u, hold.keyId),
      ...[...spent.keys()].map((id) => this.budgetHash(u, id))];
    const key = hold.keyId === null ? undefined : after?.key;
    await this.s.release(counted(keys), [hold.ref, after?.user?.balance ?? '', after?.user?.version ?? '', key?.balance ?? '', key?.version ?? '',
      ...[...spent].flatMap(([id, m]) => [id, m?.periodKey ?? '', m?.spent ?? ''])]);
  }

  async renew(holds: Hold[], leaseMs: number): Promise<number> {
    this.connected();
    const t = performance.now();
    for (const [u, at] of this.touched) if (t - at >= leaseMs) this.touched.delete(u);
    if (!holds.length) return 0;
    const byUser = new Map<number, Hold[]>();
    for (const h of holds) byUser.set(h.userId, [...(byUser.get(h.userId) ?? []), h]);
    const pipe = this.redis.pipeline();
    for (const [u, list] of byUser) {
      this.s.touch.on(pipe, [this.index], [u, leaseMs]);
      const keys = [this.user(u, 'acct'), this.user(u, 'holds'), this.user(u, 'leases'), this.user(u, 'limbo'),
        ...list.flatMap((h) => [this.keyHash(u, h.keyId), ...(h.budgetIds ?? []).map((id) => this.budgetHash(u, id))])];
      this.s.renew.on(pipe, counted(keys), [leaseMs, ...list.flatMap((h) => [h.ref, h.amount, h.keyId ?? '', (h.budgetIds ?? []).join(','), h.budgetIds?.length ?? 0])]);
    }
    const renewed = results(await pipe.exec()).reduce<number>((n, v, i) => n + (i % 2 === 1 ? Number(v) : 0), 0);
    for (const u of byUser.keys()) this.touched.set(u, t);
    return renewed;
  }

  async applyBalance(target: HoldTarget, mirror: Mirror, opts: { ifPresent?: boolean } = {}): Promise<boolean> {
    const key = target.keyId == null ? this.user(target.userId, 'acct') : this.keyHash(target.userId, target.keyId);
    return (await this.s.apply([key], [mirror.balance, mirror.version, opts.ifPresent ? '1' : ''])) === 1;
  }

  async applyBudget(userId: number, mirror: BudgetMirror): Promise<boolean> {
    return (await this.s.bapply([this.budgetHash(userId, mirror.id)], [mirror.periodKey, mirror.spent, '1'])) === 1;
  }

  async budgetUsage(userId: number, budgetId: number): Promise<{ periodKey: string; spent: number; held: number } | null> {
    const [pk, spent, held] = await this.redis.hmget(this.budgetHash(userId, budgetId), 'pk', 'spent', 'held');
    return pk == null ? null : { periodKey: pk, spent: Number(spent ?? 0), held: Number(held ?? 0) };
  }

  async available(target: HoldTarget): Promise<{ user: number | null; key: number | null }> {
    this.connected();
    const pipe = this.redis.pipeline().hmget(this.user(target.userId, 'acct'), 'bal', 'held');
    if (target.keyId != null) pipe.hmget(this.keyHash(target.userId, target.keyId), 'bal', 'held');
    const [u, k] = results(await pipe.exec()) as Array<Array<string | null>>;
    const avail = (v: Array<string | null> | undefined) => (v?.[0] == null ? null : Number(v[0]) - Number(v[1] ?? 0));
    return { user: avail(u), key: avail(k) };
  }

  async holders(): Promise<number[]> {
    return (await this.redis.zrange(this.index, '0', '-1')).map(Number);
  }

  async expired(): Promise<Hold[]> {
    const users = (await this.redis.zrange(this.index, '0', '-1')).map(Number);
    if (!users.length) return [];
    const pipe = this.redis.pipeline();
    for (const u of users) this.s.sweep.on(pipe, [this.user(u, 'holds'), this.user(u, 'leases'), this.user(u, 'limbo')], []);
    const swept = results(await pipe.exec()) as Array<Array<number | string>>;
    const out: Hold[] = [];
    const forget = this.redis.pipeline();
    swept.forEach((r, i) => {
      const userId = users[i]!;
      if (Number(r[0]) === 0) this.s.forget.on(forget, [this.index], [userId]);
      for (let j = 1; j < r.length; j += 2) {
        const [amount, keyId, bids] = String(r[j + 1]).split(':');
        const budgetIds = bids ? { budgetIds: bids.split(',').map(Number) } : {};
        out.push({ ref: String(r[j]), userId, keyId: keyId ? Number(keyId) : null, amount: Number(amount), ...budgetIds });
      }
    });
    if (forget.length) results(await forget.exec());
    return out;
  }
}

/**
 * Why this Redis may drop hold data under memory pressure, or null. An `allkeys-*` policy with a memory
 * limit evicts keys that have no TTL, such as a user's `acct` (Σ held: holds stop counting, overspend)
 * or its `holds` (releases find nothing: holds count forever). `volatile-*` only evicts keys with a TTL,
 * which no hold key has.
 */
export function evictionRiskOf(policy: string | null, maxmemory: number | null): string | null {
  if (!policy || !policy.startsWith('allkeys-') || !maxmemory) return null;
  return `maxmemory-policy ${policy} with maxmemory ${maxmemory} may evict quota holds; use noeviction (or a volatile-* policy)`;
}

/** evictionRiskOf() for a live server; null also when CONFIG is not allowed (managed Redis): nothing known. */
export async function evictionRisk(redis: Redis): Promise<string | null> {
  try {
    const [, policy] = (await redis.config('GET', 'maxmemory-policy')) as string[];
    const [, max] = (await redis.config('GET', 'maxmemory')) as string[];
    return evictionRiskOf(policy ?? null, max == null ? null : Number(max));
  } catch {
    return null;
  }
}

/** Keys of a script with a variable number of them: the count goes first. */
function counted(keys: string[]): string[] {
  return [String(keys.length), ...keys];
}

/** A pipeline's values, throwing its first error (a script error must not pass as a value). */
function results(exec: Exec | null): unknown[] {
  if (!exec) throw new Error('redis pipeline was discarded');
  return exec.map(([err, v]) => {
    if (err) throw err;
    return v;
  });
}
