/**
 * The gateway-wide cap on relayed requests in flight (streams count until they close). Each holds two
 * descriptors (the client's socket and the upstream's) and one of Bun's outbound fetch slots; past
 * either limit a request would not fail, it would wait silently in Bun's queue or break on EMFILE. So
 * admission refuses it at once with 503 overloaded_error and retry-after, before any quota is held or
 * any upstream is called.
 */
import { BUN_FETCH_MAX, GatewayError } from '@gw/core';

/** Outbound fetches that are not relayed requests (probes, count_tokens, payment providers) get this many of Bun's slots. */
export const FETCH_HEADROOM = 64;

/** Largest cap: Bun's largest fetch limit less the headroom. */
export const MAX_UPSTREAM_CAP = BUN_FETCH_MAX - FETCH_HEADROOM;

/**
 * The default cap for a descriptor limit: (nofile - reserve) / 2, reserve = min(1024, nofile / 4) for the
 * database, journal, listener, management clients and pooled idle upstream sockets. Unknown limit: the largest cap.
 */
export function defaultUpstreamCap(nofile: number | null): number {
  if (nofile === null) return MAX_UPSTREAM_CAP;
  const reserve = Math.min(1024, Math.floor(nofile / 4));
  return Math.max(1, Math.min(MAX_UPSTREAM_CAP, Math.floor((nofile - reserve) / 2)));
}

/** The BUN_CONFIG_MAX_HTTP_REQUESTS a process with this cap needs: the cap plus the headroom. */
export const fetchLimitFor = (cap: number) => Math.min(BUN_FETCH_MAX, cap + FETCH_HEADROOM);

/**
 * The BUN_CONFIG_MAX_HTTP_REQUESTS a server process should be (re)started with: the cap (MAX_UPSTREAM_CONNECTIONS,
 * else the default for `nofile`) plus the headroom; null when the operator already set it.
 */
export function wantedFetchLimit(env: Record<string, string | undefined>, nofile: number | null): number | null {
  if (env.BUN_CONFIG_MAX_HTTP_REQUESTS !== undefined) return null;
  const configured = Number(env.MAX_UPSTREAM_CONNECTIONS);
  // A malformed value is reported by the configuration loader; here it just falls back to the default.
  const cap = Number.isSafeInteger(configured) && configured >= 1 && configured <= MAX_UPSTREAM_CAP ? configured : defaultUpstreamCap(nofile);
  return fetchLimitFor(cap);
}

/** `connection: close`: a refused client's idle keep-alive socket would hold the very descriptor the cap protects. */
export const upstreamOverloaded = (max: number) => new GatewayError(503, 'upstream_capacity',
  `The gateway is relaying its maximum of ${max} requests at once; retry shortly`, { type: 'overloaded_error', headers: { 'retry-after': '1', connection: 'close' } });

/** 429, not 503: the gateway has room, this user has used its share (MAX_UPSTREAM_CONNECTIONS_PER_USER). */
export const upstreamShareUsed = (share: number) => new GatewayError(429, 'user_upstream_share_exceeded',
  `This user already has ${share} relayed requests in flight, its share of the gateway's upstream connections; retry when one ends`,
  { type: 'rate_limit_error', headers: { 'retry-after': '1' } });

export class UpstreamSlots {
  private used = 0;
  private readonly byUser = new Map<number, number>();

  /**
   * `max`: slots of the whole process. `perUser`: most of them one user (all its keys) may hold, so one
   * account cannot starve every other; 0 = no share.
   */
  constructor(readonly max: number, readonly perUser = 0) {}

  /** Slots taken now. */
  get inUse(): number {
    return this.used;
  }

  /** Takes a slot (counted against `userId`'s share), or throws the 429 or the 503. The returned release is idempotent. */
  acquire(userId?: number): () => void {
    const share = this.perUser > 0 && userId !== undefined;
    const mine = share ? this.byUser.get(userId) ?? 0 : 0;
    if (share && mine >= this.perUser) throw upstreamShareUsed(this.perUser);
    if (this.used >= this.max) throw upstreamOverloaded(this.max);
    this.used++;
    if (share) this.byUser.set(userId, mine + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.used--;
      if (!share) return;
      const n = (this.byUser.get(userId) ?? 1) - 1;
      if (n > 0) this.byUser.set(userId, n);
      else this.byUser.delete(userId);
    };
  }
}
