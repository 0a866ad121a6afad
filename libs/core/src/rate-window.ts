/**
 * In-memory sliding-window counters (two fixed windows, weighted), for per-IP login limits and
 * per-key request rates. O(1) per hit; stale keys are swept lazily so memory stays bounded.
 */
export class RateWindow {
  private readonly cur = new Map<string, number>();
  private prev = new Map<string, number>();
  private windowStart: number;

  constructor(private readonly windowMs: number, private readonly now: () => number = Date.now) {
    this.windowStart = this.now();
  }

  private roll(): number {
    const t = this.now();
    const elapsed = t - this.windowStart;
    if (elapsed >= this.windowMs) {
      // One window passed: current becomes previous; two or more: both are stale.
      this.prev = elapsed >= 2 * this.windowMs ? new Map() : new Map(this.cur);
      this.cur.clear();
      this.windowStart = t - (elapsed % this.windowMs);
    }
    return t;
  }

  /** Estimated hits in the last window for `key`. */
  count(key: string): number {
    const t = this.roll();
    const weight = 1 - (t - this.windowStart) / this.windowMs;
    return (this.cur.get(key) ?? 0) + (this.prev.get(key) ?? 0) * weight;
  }

  /**
   * Counts a hit if under `limit`; returns 0 when allowed, else the seconds until a retry may pass.
   */
  hit(key: string, limit: number): number {
    if (this.count(key) >= limit) return Math.max(1, Math.ceil((this.windowStart + this.windowMs - this.now()) / 1000));
    this.cur.set(key, (this.cur.get(key) ?? 0) + 1);
    return 0;
  }

  reset(key: string): void {
    this.cur.delete(key);
    this.prev.delete(key);
  }
}
