import type { AfterCommit, Hold, HoldStore } from './port';

/**
 * A node's holds in flight, renewed in one batch every lease/3 so they never lapse while the node
 * lives. The same batch is what puts them back after Redis lost its data, which is why the
 * store's recovery window must be longer than one interval.
 *
 * Fencing: every hold tracked at the last renewal that succeeded is safe until that time plus a lease (a
 * hold reserved later, until its own reservation plus a lease). When renewals keep failing for half a
 * lease (a node cut off from Redis while PostgreSQL still takes its charges), `onLost` runs once: the node
 * stops its metered requests in flight, so they settle while their holds still count for every other node,
 * instead of serving on after the leader has released the holds (and another node has spent that money).
 */
export class LiveHolds {
  private readonly live = new Map<string, Hold>();
  private readonly timer: ReturnType<typeof setInterval>;
  /** When every live hold was last known to be renewed (or there was none to renew). */
  private confirmedAt = performance.now();
  private fenced = false;
  /** A renewal still waiting for Redis (one that hangs must not stop the fence's clock, nor pile up). */
  private renewing: Promise<number> | null = null;
  /** Settles once every renewal sent so far has its answer (or its error). */
  private renewals: Promise<void> = Promise.resolve();

  constructor(
    private readonly store: HoldStore,
    private readonly leaseMs: number,
    private readonly onError: (err: unknown) => void = () => {},
    private readonly onLost: () => void = () => {},
  ) {
    this.timer = setInterval(() => this.tick(), Math.max(1, Math.floor(leaseMs / 3)));
  }

  track(hold: Hold): void {
    this.live.set(hold.ref, hold);
  }

  untrack(hold: Hold): void {
    this.live.delete(hold.ref);
  }

  /**
   * Untracks `hold` and releases it, after any renewal still unanswered: a renewal registers again a hold it
   * finds missing, and one that lands after the release (ioredis sends it again, as EVAL, after a NOSCRIPT)
   * kept the request's money held on every node until the lease lapsed and the reconciler released it.
   */
  async release(hold: Hold, after?: AfterCommit): Promise<void> {
    this.untrack(hold);
    await this.renewals;
    await this.store.release(hold, after);
  }

  get size(): number {
    return this.live.size;
  }

  /** Renews every tracked hold now (also right after a Redis reconnect); returns how many were re-registered. */
  async renewNow(): Promise<number> {
    const started = performance.now();
    if (!this.live.size) {
      this.confirm(started);
      return 0;
    }
    const sent = this.store.renew([...this.live.values()], this.leaseMs);
    const settled = sent.catch(() => {});
    // To nothing: Promise.all's array would hold the previous one's, each renewal's chained for as long as the node runs.
    this.renewals = Promise.all([this.renewals, settled]).then(() => {});
    try {
      const n = await sent;
      this.confirm(started);
      return n;
    } catch (err) {
      this.onError(err);
      return 0;
    }
  }

  close(): void {
    clearInterval(this.timer);
  }

  private tick(): void {
    if (!this.live.size) this.confirm(performance.now());
    else this.renewing ??= this.renewNow().finally(() => { this.renewing = null; });
    if (!this.fenced && performance.now() - this.confirmedAt >= this.leaseMs / 2) {
      this.fenced = true;
      this.onLost();
    }
  }

  /** A renewal begun at `at` succeeded: the holds it covered are safe for a lease from then. */
  private confirm(at: number): void {
    this.confirmedAt = Math.max(this.confirmedAt, at);
    this.fenced = false;
  }
}
