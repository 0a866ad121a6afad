import type { Hold, HoldStore } from './port';

/**
 * A node's holds in flight, renewed in one batch every lease/3 so they never lapse while the node
 * lives. The same batch is what puts them back after Redis lost its data, which is why the
 * store's recovery window must be longer than one interval.
 */
export class LiveHolds {
  private readonly live = new Map<string, Hold>();
  private readonly timer: ReturnType<typeof setInterval>;

  constructor(private readonly store: HoldStore, private readonly leaseMs: number, private readonly onError: (err: unknown) => void = () => {}) {
    this.timer = setInterval(() => void this.renewNow(), Math.max(1, Math.floor(leaseMs / 3)));
  }

  track(hold: Hold): void {
    this.live.set(hold.ref, hold);
  }

  untrack(hold: Hold): void {
    this.live.delete(hold.ref);
  }

  get size(): number {
    return this.live.size;
  }

  /** Renews every tracked hold now (also right after a Redis reconnect); returns how many were re-registered. */
  async renewNow(): Promise<number> {
    if (!this.live.size) return 0;
    try {
      return await this.store.renew([...this.live.values()], this.leaseMs);
    } catch (err) {
      this.onError(err);
      return 0;
    }
  }

  close(): void {
    clearInterval(this.timer);
  }
}
