/**
 * Rate and concurrency limits as a port: one in-process implementation (SQLite mode, a single
 * node) and one on Redis (`@gw/core/redis/rate-limits`, shared by every node). Both run the same
 * contract suite, so a limit means the same thing in either mode.
 */

export interface HitOptions {
  /** Most units allowed per window. */
  limit: number;
  windowMs: number;
  /** Units this hit uses (requests: 1; tokens: the count). Default 1. */
  cost?: number;
}

export interface HitResult {
  ok: boolean;
  /** 0 when ok; otherwise the ms until this hit would pass if nothing else were counted (at least 1; windowRetryAfter). */
  retryAfterMs: number;
  /** Units still allowed in the window after this hit. */
  remaining: number;
  /** Start of the window the hit was counted in (for `unhit`). */
  windowStart: number;
}

export interface AcquireOptions {
  /** Most leases held at once under the key. */
  max: number;
  /** A lease not renewed for this long stops counting (its holder is presumed dead). */
  leaseMs: number;
}

export interface Lease {
  readonly key: string;
  readonly id: string;
}

export interface RateLimits {
  /**
   * Sliding-window limit, approximated with two fixed windows aligned to multiples of `windowMs`:
   * estimate = current + previous × (share of the previous window still inside the sliding one).
   * The hit passes when floor(estimate) + cost ≤ limit, and is then counted; a refused hit is not.
   */
  hit(key: string, opts: HitOptions): Promise<HitResult>;
  /**
   * Gives back `cost` units a passed hit counted in the window starting at `windowStart` (its `HitResult`), for a
   * request refused before it used what it was counted for. Nothing when that window is older than the previous one.
   */
  unhit(key: string, opts: { windowMs: number; cost: number; windowStart: number }): Promise<void>;
  /** Forgets `key`'s window (e.g. after a successful login). */
  reset(key: string): Promise<void>;
  /** A lease when fewer than `max` live leases exist under `key`, else null. */
  acquire(key: string, opts: AcquireOptions): Promise<Lease | null>;
  /**
   * Extends a live lease. A lease that had already expired is counted again (its holder is alive
   * after all, so the count must say so, even above `max`); returns false in that case.
   */
  renew(lease: Lease, leaseMs: number): Promise<boolean>;
  /** Gives the lease back; idempotent. */
  release(lease: Lease): Promise<void>;
  /** Live leases under `key`. */
  active(key: string): Promise<number>;
}

/** Whole, positive numbers whatever the caller passed (both implementations see the same values). */
export function normalizeHit(opts: HitOptions): Required<HitOptions> {
  return {
    limit: Math.max(0, Math.floor(opts.limit) || 0),
    windowMs: Math.max(1, Math.floor(opts.windowMs) || 1),
    cost: Math.max(0, Math.ceil(opts.cost ?? 1) || 0),
  };
}

export function normalizeAcquire(opts: AcquireOptions): AcquireOptions {
  return { max: Math.max(0, Math.floor(opts.max) || 0), leaseMs: Math.max(1, Math.floor(opts.leaseMs) || 1) };
}

/** The two-window estimate shared by both implementations (the Redis script mirrors it). */
export function windowEstimate(cur: number, prev: number, windowStart: number, windowMs: number, now: number): number {
  return cur + prev * (1 - (now - windowStart) / windowMs);
}

/**
 * The ms until a refused hit of `cost` would pass if nothing else were counted (at least 1): when the estimate
 * falls below limit − cost + 1 (a hit passes while floor(estimate) + cost ≤ limit). The end of the current window
 * was wrong both ways: the previous window's weight falls during this one, so a hit may pass long before it ends
 * (a client told to wait out the minute waited for nothing); and after the edge this window's count weighs almost
 * whole, so a large hit (tokens per minute) retried at the edge was refused again, and a client honouring
 * retry-after used its retries up. A hit larger than the limit never passes: the window's end (callers refuse it
 * without a retry-after). The Redis script mirrors this.
 */
export function windowRetryAfter(cur: number, prev: number, start: number, windowMs: number, t: number, limit: number, cost: number): number {
  const room = limit - cost + 1;
  const end = start + windowMs;
  let at = end;
  // This window: cur + prev × (1 − (at − start)/windowMs) < room.
  if (cur < room && prev > 0) at = start + windowMs * (1 - (room - cur) / prev);
  // The next one: this window's count becomes the previous one, cur × (1 − (at − end)/windowMs) < room.
  else if (room > 0 && cur >= room) at = end + windowMs * (1 - room / cur);
  // +1: the estimate must fall strictly below `room`, and the float may land a hair above it.
  return Math.max(1, Math.ceil(at - t) + 1);
}

/** One key's two fixed windows: the current one (starting at `start`) and the one before it. */
export interface WindowCounter {
  start: number;
  cur: number;
  prev: number;
  windowMs: number;
}

/**
 * One hit against a key's stored counter (or none), at time `t`: the result and the counter to store after it
 * (a refused hit still rolls the windows forward). The in-process limits and the SQLite attempt windows both
 * step through here, so a limit counts alike wherever it is kept.
 */
export function stepWindow(c: WindowCounter | undefined, input: HitOptions, t: number): { result: HitResult; next: WindowCounter } {
  const opts = normalizeHit(input);
  const cost = opts.cost;
  const start = t - (t % opts.windowMs);
  let cur = 0;
  let prev = 0;
  if (c && c.windowMs === opts.windowMs) {
    if (c.start === start) [cur, prev] = [c.cur, c.prev];
    else if (c.start === start - opts.windowMs) prev = c.cur;
  }
  const used = Math.floor(windowEstimate(cur, prev, start, opts.windowMs, t));
  if (used + cost > opts.limit) {
    const retryAfterMs = windowRetryAfter(cur, prev, start, opts.windowMs, t, opts.limit, cost);
    return { result: { ok: false, retryAfterMs, remaining: Math.max(0, opts.limit - used), windowStart: start }, next: { start, cur, prev, windowMs: opts.windowMs } };
  }
  return { result: { ok: true, retryAfterMs: 0, remaining: Math.max(0, opts.limit - used - cost), windowStart: start }, next: { start, cur: cur + cost, prev, windowMs: opts.windowMs } };
}

/** A counter with `cost` given back to the window starting at `windowStart` (the current or the previous one). */
export function unstep(c: WindowCounter, o: { windowMs: number; cost: number; windowStart: number }): WindowCounter {
  if (c.windowMs !== o.windowMs) return c;
  if (c.start === o.windowStart) return { ...c, cur: Math.max(0, c.cur - o.cost) };
  if (c.start === o.windowStart + o.windowMs) return { ...c, prev: Math.max(0, c.prev - o.cost) };
  return c;
}

/**
 * In-process limits. Memory stays bounded: every `sweepEvery` calls, counters idle for two windows
 * and expired leases are dropped.
 */
export class MemoryRateLimits implements RateLimits {
  private readonly counters = new Map<string, WindowCounter>();
  private readonly leases = new Map<string, Map<string, number>>();
  private calls = 0;
  private seq = 0;

  constructor(private readonly now: () => number = Date.now, private readonly sweepEvery = 4096) {}

  async hit(key: string, input: HitOptions): Promise<HitResult> {
    const { result, next } = stepWindow(this.counters.get(key), input, this.tick());
    this.counters.set(key, next);
    return result;
  }

  async unhit(key: string, opts: { windowMs: number; cost: number; windowStart: number }): Promise<void> {
    const c = this.counters.get(key);
    if (c) this.counters.set(key, unstep(c, opts));
  }

  async reset(key: string): Promise<void> {
    this.counters.delete(key);
  }

  async acquire(key: string, input: AcquireOptions): Promise<Lease | null> {
    const t = this.tick();
    const opts = normalizeAcquire(input);
    const held = this.live(key, t);
    if (held.size >= opts.max) return null;
    const id = `${t.toString(36)}-${(++this.seq).toString(36)}`;
    held.set(id, t + opts.leaseMs);
    this.leases.set(key, held);
    return { key, id };
  }

  async renew(lease: Lease, leaseMs: number): Promise<boolean> {
    const t = this.tick();
    const held = this.live(lease.key, t);
    const had = held.has(lease.id);
    held.set(lease.id, t + normalizeAcquire({ max: 0, leaseMs }).leaseMs);
    this.leases.set(lease.key, held);
    return had;
  }

  async release(lease: Lease): Promise<void> {
    const held = this.leases.get(lease.key);
    if (!held) return;
    held.delete(lease.id);
    if (!held.size) this.leases.delete(lease.key);
  }

  async active(key: string): Promise<number> {
    return this.live(key, this.now()).size;
  }

  /** The key's leases with the expired ones removed. */
  private live(key: string, t: number): Map<string, number> {
    const held = this.leases.get(key) ?? new Map<string, number>();
    for (const [id, exp] of held) if (exp <= t) held.delete(id);
    return held;
  }

  private tick(): number {
    const t = this.now();
    if (++this.calls % this.sweepEvery === 0) this.sweep(t);
    return t;
  }

  private sweep(t: number): void {
    for (const [k, c] of this.counters) if (c.start + 2 * c.windowMs <= t) this.counters.delete(k);
    for (const [k, held] of this.leases) {
      for (const [id, exp] of held) if (exp <= t) held.delete(id);
      if (!held.size) this.leases.delete(k);
    }
  }
}
