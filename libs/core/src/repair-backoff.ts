/**
 * The wait before a cache repair (a full resync) after a failure: 0.25 s, doubling up to `maxMs`. It starts over
 * only after a quiet spell (`maxMs`, and twice the last wait), not at the first repair that works: a per-row
 * refresh that keeps failing while the whole reload gets through (a database shedding load) otherwise made every
 * failing refresh (one per settled request of a limited key) one more reload of every cache, back to back.
 */
export class RepairBackoff {
  private failures = 0;
  private lastAt = -Infinity;
  private lastDelay = 0;

  constructor(private readonly maxMs: number, private readonly now: () => number = () => performance.now()) {}

  /** The wait for the repair due now (counts it as one more failure). */
  next(): number {
    const now = this.now();
    if (now - this.lastAt > Math.max(this.maxMs, 2 * this.lastDelay)) this.failures = 0;
    this.lastAt = now;
    this.lastDelay = Math.min(250 * 2 ** Math.min(this.failures++, 16), this.maxMs);
    return this.lastDelay;
  }
}
