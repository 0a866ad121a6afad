/**
 * Lockout counters for usernames that do not exist. A stored account counts failures in its row;
 * without this, an unknown name never answered `account_locked`, which told an attacker which names
 * are real. Unknown names follow the same rule (maxFailures, then lockSeconds * 2^locks) in memory,
 * bounded: at most `maxEntries` names (least recently failed evicted first), and a name idle for
 * `idleMs` after its lock ended is forgotten.
 */
export interface LockoutPolicy {
  maxFailures: number;
  lockSeconds: number;
}

/**
 * Where unknown names are counted: this process (`UnknownNameLockout`) or every node (PostgreSQL, in
 * PostgreSQL mode: with per-process counters, N nodes let an unknown name fail N× as often as a
 * real one before it locks, which tells an attacker which names exist; kept in the database like an
 * account's counters, so a loss of Redis's data does not unlock them either).
 */
export interface NameLockouts {
  /**
   * Counts an attempt for `name` before its (dummy) password check, as a failure, unless the name is
   * locked; returns that lock's end (0 = not locked, go on). One atomic step, so a parallel burst gets
   * as many attempts through as it would on a real account.
   */
  claim(name: string, nowMs: number): number | Promise<number>;
}

/** A name's counters: failures since its last lock, locks so far, and the lock's end in seconds (0 = none). */
export interface LockoutCount { failed: number; locks: number; lockedUntil: number }

/**
 * One more failure on `c` (a fresh count when undefined), with the same arithmetic as the stored counter
 * (SecurityRepo.recordLoginFailure): at maxFailures the name locks for lockSeconds * 2^(locks so far), rounded
 * up to a whole second so a lock never lasts less than configured.
 */
export function countFailure(c: LockoutCount | undefined, policy: LockoutPolicy, nowMs: number): LockoutCount {
  const next = { failed: (c?.failed ?? 0) + 1, locks: c?.locks ?? 0, lockedUntil: c?.lockedUntil ?? 0 };
  if (next.failed < policy.maxFailures) return next;
  return { failed: 0, locks: next.locks + 1, lockedUntil: Math.ceil(nowMs / 1000 + policy.lockSeconds * 2 ** Math.min(next.locks, 16)) };
}

interface Entry extends LockoutCount { touchedMs: number }

export class UnknownNameLockout implements NameLockouts {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly policy: LockoutPolicy,
    private readonly maxEntries = 10_000,
    private readonly idleMs = 24 * 3600_000,
  ) {}

  /** Seconds-resolution lock end for `name` (0 = not locked), like a user row's `lockedUntil`. */
  lockedUntil(name: string, nowMs: number): number {
    const e = this.live(name, nowMs);
    return e ? e.lockedUntil : 0;
  }

  /** Counts one failure (countFailure). */
  recordFailure(name: string, nowMs: number): void {
    const e: Entry = { ...countFailure(this.live(name, nowMs), this.policy, nowMs), touchedMs: nowMs };
    // Re-inserting keeps the Map in least-recently-failed order, so eviction takes the oldest.
    this.entries.delete(name);
    this.entries.set(name, e);
    while (this.entries.size > this.maxEntries) this.entries.delete(this.entries.keys().next().value!);
  }

  claim(name: string, nowMs: number): number {
    const until = this.lockedUntil(name, nowMs);
    if (until > Math.floor(nowMs / 1000)) return until;
    this.recordFailure(name, nowMs);
    return 0;
  }

  get size(): number { return this.entries.size; }

  private live(name: string, nowMs: number): Entry | undefined {
    const e = this.entries.get(name);
    if (e && Math.max(e.touchedMs, e.lockedUntil * 1000) + this.idleMs < nowMs) {
      this.entries.delete(name);
      return undefined;
    }
    return e;
  }
}
