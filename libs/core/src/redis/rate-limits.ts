import type { Redis } from 'ioredis';
import { randomUUID } from 'node:crypto';
import { normalizeAcquire, normalizeHit, type AcquireOptions, type HitOptions, type HitResult, type Lease, type RateLimits } from '../rate-limits';
import { retryFor } from '../retry-for';
import { defineScript, LUA_NOW, type Script } from './script';

/**
 * The window state is one hash {s: window start, c: current, p: previous, w: window length}; the
 * estimate is MemoryRateLimits' (`windowEstimate`). A refused hit changes nothing.
 */
const HIT = `${LUA_NOW}
local limit, win, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local start = now - (now % win)
local v = redis.call('HMGET', KEYS[1], 's', 'c', 'p', 'w')
local cur, prev = 0, 0
if v[4] and tonumber(v[4]) == win then
  local s = tonumber(v[1])
  if s == start then cur = tonumber(v[2]); prev = tonumber(v[3])
  elseif s == start - win then prev = tonumber(v[2]) end
end
local used = math.floor(cur + prev * (1 - (now - start) / win))
if used + cost > limit then
  -- windowRetryAfter: when the estimate falls below limit - cost + 1, in this window or the next.
  local room, at = limit - cost + 1, start + win
  if cur < room and prev > 0 then at = start + win * (1 - (room - cur) / prev)
  elseif room > 0 and cur >= room then at = start + win + win * (1 - room / cur) end
  return {0, math.max(1, math.ceil(at - now) + 1), math.max(0, limit - used), start}
end
redis.call('HSET', KEYS[1], 's', start, 'c', cur + cost, 'p', prev, 'w', win)
redis.call('PEXPIRE', KEYS[1], 2 * win)
return {1, 0, math.max(0, limit - used - cost), start}
`;

/** MemoryRateLimits' unstep: the cost back to the current window, or to the previous one if it has rolled. */
const UNHIT = `
local win, cost, at = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local v = redis.call('HMGET', KEYS[1], 's', 'c', 'p', 'w')
if not v[4] or tonumber(v[4]) ~= win then return 0 end
local s = tonumber(v[1])
if s == at then redis.call('HSET', KEYS[1], 'c', math.max(0, tonumber(v[2]) - cost)); return 1 end
if s == at + win then redis.call('HSET', KEYS[1], 'p', math.max(0, tonumber(v[3]) - cost)); return 1 end
return 0
`;

/** Leases are a sorted set member → expiry; the set itself expires with its last lease. */
const LEASE_PRUNE = `${LUA_NOW}
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local function keep()
  local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if top[2] then redis.call('PEXPIREAT', KEYS[1], top[2]) end
end
`;

const ACQUIRE = `${LEASE_PRUNE}
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
keep()
return 1
`;

const RENEW = `${LEASE_PRUNE}
local had = redis.call('ZSCORE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[2])
keep()
if had then return 1 end
return 0
`;

const ACTIVE = `${LUA_NOW}
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
`;

/**
 * Limits shared by every node through Redis: one script per operation, one key per limit, each
 * key hash-tagged (`{rl:…}`, `{cc:…}`) so the same code runs on a Redis Cluster.
 */
export class RedisRateLimits implements RateLimits {
  /**
   * The leases this process holds (id → key and length), so `renewLive` can put them all back after Redis lost
   * its data: until then a key's requests still running would not count against its `max_concurrency`.
   */
  private readonly live = new Map<string, { key: string; leaseMs: number }>();
  /**
   * Renewals still waiting for their answer, per lease: a release waits for them before its ZREM, since a renewal
   * re-adds a lease it finds missing, and one that lands after the release (re-sent as EVAL after a NOSCRIPT, or
   * resent after a reconnect) would count the finished request again for a whole lease.
   */
  private readonly renewing = new Map<string, Promise<unknown>>();
  private readonly hitScript: Script;
  private readonly unhitScript: Script;
  private readonly acquireScript: Script;
  private readonly renewScript: Script;
  private readonly activeScript: Script;

  constructor(private readonly redis: Redis, private readonly prefix = 'gw:') {
    this.hitScript = defineScript(redis, 'gwRateHit', 1, HIT);
    this.unhitScript = defineScript(redis, 'gwRateUnhit', 1, UNHIT);
    this.acquireScript = defineScript(redis, 'gwLeaseAcquire', 1, ACQUIRE);
    this.renewScript = defineScript(redis, 'gwLeaseRenew', 1, RENEW);
    this.activeScript = defineScript(redis, 'gwLeaseActive', 1, ACTIVE);
  }

  private rateKey(key: string): string {
    return `${this.prefix}{rl:${key}}`;
  }

  private leaseKey(key: string): string {
    return `${this.prefix}{cc:${key}}`;
  }

  async hit(key: string, input: HitOptions): Promise<HitResult> {
    const opts = normalizeHit(input);
    const [ok, retryAfterMs, remaining, windowStart] = (await this.hitScript([this.rateKey(key)], [opts.limit, opts.windowMs, opts.cost])) as number[];
    return { ok: ok === 1, retryAfterMs: retryAfterMs!, remaining: remaining!, windowStart: windowStart! };
  }

  async unhit(key: string, opts: { windowMs: number; cost: number; windowStart: number }): Promise<void> {
    await this.unhitScript([this.rateKey(key)], [opts.windowMs, opts.cost, opts.windowStart]);
  }

  async reset(key: string): Promise<void> {
    await this.redis.unlink(this.rateKey(key));
  }

  async acquire(key: string, input: AcquireOptions): Promise<Lease | null> {
    const opts = normalizeAcquire(input);
    const id = randomUUID();
    const got = await this.acquireScript([this.leaseKey(key)], [opts.max, opts.leaseMs, id]);
    if (got !== 1) return null;
    this.live.set(id, { key, leaseMs: opts.leaseMs });
    return { key, id };
  }

  async renew(lease: Lease, leaseMs: number): Promise<boolean> {
    const ms = normalizeAcquire({ max: 0, leaseMs }).leaseMs;
    const held = this.live.get(lease.id);
    if (held) held.leaseMs = ms;
    return (await this.sentRenewal(lease.id, () => this.renewScript([this.leaseKey(lease.key)], [ms, lease.id]))) === 1;
  }

  private sentRenewal(id: string, send: () => Promise<unknown>): Promise<unknown> {
    const p = send();
    const settled = p.catch(() => {});
    this.renewing.set(id, settled);
    void settled.then(() => { if (this.renewing.get(id) === settled) this.renewing.delete(id); });
    return p;
  }

  /**
   * Idempotent (ZREM of the lease's own id: a second one removes nothing, never another request's slot). A ZREM
   * lost in a Redis blip is retried until it lands or the lease would have lapsed anyway: before, one failed
   * command kept the slot counted for the whole LIMIT_LEASE_MS (a key limited to 1 locked out for two minutes).
   * Resolves once the lease is gone from Redis; rejects only when every try within the lease failed.
   */
  async release(lease: Lease): Promise<void> {
    const held = this.live.get(lease.id);
    if (!held) return;
    this.live.delete(lease.id);
    await this.renewing.get(lease.id);
    await retryFor(() => this.redis.zrem(this.leaseKey(lease.key), lease.id), held.leaseMs, () => this.redis.status === 'end');
  }

  /**
   * Renews every lease this process holds, now (a Redis reconnect, and every period of the shared admission's
   * renewals: after a data loss admissions wait that long, so the leases are back when they reopen). Returns how
   * many had to be counted again (0 unless Redis lost them).
   */
  async renewLive(): Promise<number> {
    const leases = [...this.live].map(([id, l]) => ({ id, key: l.key, leaseMs: l.leaseMs }));
    if (!leases.length) return 0;
    // Sent in this synchronous loop, on the one connection a release's ZREM also takes: a lease released after
    // this point is removed after its renewal, not brought back by it.
    const had = await Promise.all(leases.map((l) => this.sentRenewal(l.id, () => this.renewScript([this.leaseKey(l.key)], [l.leaseMs, l.id]))));
    return had.filter((h) => h !== 1).length;
  }

  async active(key: string): Promise<number> {
    return Number(await this.activeScript([this.leaseKey(key)], []));
  }
}
