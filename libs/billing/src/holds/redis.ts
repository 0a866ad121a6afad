import { safeCount } from '@gw/core';
import type { Redis } from 'ioredis';
import { defineScript, type Script } from '@gw/core/redis/script';
import { normalizeReserve, shortfall, type Hold, type HoldStore, type HoldTarget, type Mirror, type MirrorLoader, type ReserveRequest, type ReserveResult } from './port';
import * as lua from './redis-lua';

export interface RedisHoldStoreOptions {
  /** Prefix of every key (no braces: the hash tags are the store's). Default `gw:`. */
  prefix?: string;
  /**
   * After Redis comes back empty, how long admissions that need a mirror wait before loading one:
   * at least one renewal interval (lease/3) plus a round trip, so every live hold is back first.
   */
  recoveryMs?: number;
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
  private readonly s: Record<'reserve' | 'settle' | 'release' | 'apply' | 'renew' | 'sweep' | 'touch' | 'forget' | 'epoch', Script>;

  constructor(private readonly redis: Redis, private readonly load: MirrorLoader, opts: RedisHoldStoreOptions = {}) {
    this.prefix = opts.prefix ?? 'gw:';
    this.recoveryMs = opts.recoveryMs ?? 10_000;
    this.s = {
      reserve: defineScript(redis, 'gwHoldReserve', 4, lua.RESERVE),
      settle: defineScript(redis, 'gwHoldSettle', 3, lua.SETTLE),
      release: defineScript(redis, 'gwHoldRelease', 5, lua.RELEASE),
      apply: defineScript(redis, 'gwHoldApply', 1, lua.APPLY),
      // The number of keys depends on the batch: passed first.
      renew: defineScript(redis, 'gwHoldRenew', null, lua.RENEW),
      sweep: defineScript(redis, 'gwHoldSweep', 3, lua.SWEEP),
      touch: defineScript(redis, 'gwHoldIndexTouch', 1, lua.INDEX_TOUCH),
      forget: defineScript(redis, 'gwHoldIndexForget', 1, lua.INDEX_FORGET),
      epoch: defineScript(redis, 'gwHoldEpoch', 1, lua.EPOCH),
    };
  }

  private user(userId: number, part: string): string {
    return `${this.prefix}{u:${userId}}:${part}`;
  }

  private keyHash(userId: number, keyId: number | null): string {
    return this.user(userId, `k:${keyId ?? '-'}`);
  }

  private get index(): string {
    return `${this.prefix}{holds}:users`;
  }

  async reserve(input: ReserveRequest): Promise<ReserveResult> {
    const req = normalizeReserve(input);
    const keyId = req.keyId ?? null;
    const keys = [this.user(req.userId, 'acct'), this.user(req.userId, 'holds'), this.user(req.userId, 'leases'), this.keyHash(req.userId, keyId)];
    for (let attempt = 0; ; attempt++) {
      // Written back to back on one connection: one round trip, in this order.
      const [, r] = (await Promise.all([
        this.s.touch([this.index], [req.userId, req.leaseMs]),
        this.s.reserve(keys, [req.ref, req.amount, req.leaseMs, keyId ?? '']),
      ])) as [unknown, number[]];
      if (r[0] === 1) return { ok: true, hold: { ref: req.ref, userId: req.userId, keyId, amount: r[1]! } };
      const scope = r[1] === 1 ? 'user' : 'key';
      if (r[0] === 0) return { ok: false, reason: 'short', scope, available: Math.max(0, r[2]!), shortBy: shortfall(req.amount, r[2]!)! };
      // The loader found no such user or key: nothing to spend.
      if (attempt > 0) return { ok: false, reason: 'short', scope, available: 0, shortBy: Math.max(1, req.amount) };
      const wait = await this.recoveryLeft();
      if (wait > 0) return { ok: false, reason: 'unavailable', retryAfterMs: wait };
      const m = await this.load(req.userId, keyId);
      const p = this.redis.pipeline();
      if (m.user) this.s.apply.on(p, [keys[0]!], [m.user.balance, m.user.version, '']);
      if (m.key && keyId !== null) this.s.apply.on(p, [keys[3]!], [m.key.balance, m.key.version, '']);
      results(await p.exec());
    }
  }

  /**
   * Ms until mirrors may be loaded again (0 = now). Starts the recovery window if Redis has no epoch
   * (first use, or its data was lost): a node calls it at start so the window runs from then.
   */
  async recoveryLeft(): Promise<number> {
    return Number(await this.s.epoch([`${this.prefix}{epoch}`], [this.recoveryMs]));
  }

  async settle(hold: Hold, input: number): Promise<number | null> {
    const cost = safeCount(input);
    const keys = [this.user(hold.userId, 'acct'), this.user(hold.userId, 'holds'), this.keyHash(hold.userId, hold.keyId)];
    const charged = Number(await this.s.settle(keys, [hold.ref, cost]));
    if (charged < 0) return null;
    hold.amount = charged;
    return charged;
  }

  async release(hold: Hold, after?: { user?: Mirror; key?: Mirror }): Promise<void> {
    const u = hold.userId;
    const keys = [this.user(u, 'acct'), this.user(u, 'holds'), this.user(u, 'leases'), this.user(u, 'limbo'), this.keyHash(u, hold.keyId)];
    const key = hold.keyId === null ? undefined : after?.key;
    await this.s.release(keys, [hold.ref, after?.user?.balance ?? '', after?.user?.version ?? '', key?.balance ?? '', key?.version ?? '']);
  }

  async renew(holds: Hold[], leaseMs: number): Promise<number> {
    if (!holds.length) return 0;
    const byUser = new Map<number, Hold[]>();
    for (const h of holds) byUser.set(h.userId, [...(byUser.get(h.userId) ?? []), h]);
    const pipe = this.redis.pipeline();
    for (const [u, list] of byUser) {
      this.s.touch.on(pipe, [this.index], [u, leaseMs]);
      const keys = [this.user(u, 'acct'), this.user(u, 'holds'), this.user(u, 'leases'), this.user(u, 'limbo'), ...list.map((h) => this.keyHash(u, h.keyId))];
      this.s.renew.on(pipe, [String(keys.length), ...keys], [leaseMs, ...list.flatMap((h) => [h.ref, h.amount, h.keyId ?? ''])]);
    }
    return results(await pipe.exec()).reduce<number>((n, v, i) => n + (i % 2 === 1 ? Number(v) : 0), 0);
  }

  async applyBalance(target: HoldTarget, mirror: Mirror, opts: { ifPresent?: boolean } = {}): Promise<boolean> {
    const key = target.keyId == null ? this.user(target.userId, 'acct') : this.keyHash(target.userId, target.keyId);
    return (await this.s.apply([key], [mirror.balance, mirror.version, opts.ifPresent ? '1' : ''])) === 1;
  }

  async available(target: HoldTarget): Promise<{ user: number | null; key: number | null }> {
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
        const [amount, keyId] = String(r[j + 1]).split(':');
        out.push({ ref: String(r[j]), userId, keyId: keyId ? Number(keyId) : null, amount: Number(amount) });
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

/** A pipeline's values, throwing its first error (a script error must not pass as a value). */
function results(exec: Exec | null): unknown[] {
  if (!exec) throw new Error('redis pipeline was discarded');
  return exec.map(([err, v]) => {
    if (err) throw err;
    return v;
  });
}
