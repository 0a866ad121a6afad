import { GatewayError, type RateLimits } from '@gw/core';

/**
 * Realtime sessions per key counted by every node (PostgreSQL mode: leases in Redis). A session holds a
 * lease from admission to its end; this node renews its leases every third of `leaseMs`, so a node that
 * dies stops counting once its leases lapse (LIMIT_LEASE_MS), and a closed session frees its slot at once.
 */
export class SharedSessionLeases {
  private readonly live = new Set<{ key: string; id: string }>();
  private readonly timer: ReturnType<typeof setInterval>;

  constructor(private readonly limits: Pick<RateLimits, 'acquire' | 'renew' | 'release'>, private readonly leaseMs: number) {
    this.timer = setInterval(() => {
      for (const l of this.live) void this.limits.renew(l, this.leaseMs).catch(() => { /* retried next interval; lapses only if this node is gone that long */ });
    }, Math.max(1, Math.floor(leaseMs / 3)));
  }

  /** A release function when a slot was free for `keyId` (at most `max` across nodes), else null. */
  async acquire(keyId: number, max: number): Promise<(() => void) | null> {
    let lease;
    try {
      lease = await this.limits.acquire(`rt:sess:${keyId}`, { max, leaseMs: this.leaseMs });
    } catch {
      throw new GatewayError(503, 'limits_unavailable', 'Realtime session limits cannot be checked right now; try again shortly', { headers: { 'retry-after': '1' } });
    }
    if (!lease) return null;
    this.live.add(lease);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.live.delete(lease);
      void this.limits.release(lease).catch(() => { /* the lease lapses by itself */ });
    };
  }

  close(): void {
    clearInterval(this.timer);
  }
}
