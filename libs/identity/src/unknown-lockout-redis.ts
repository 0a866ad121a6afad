import type { Redis } from 'ioredis';
import { sha256Hex } from '@gw/core';
import { defineScript, LUA_NOW, type Script } from '@gw/core/redis/script';
import type { LockoutPolicy, NameLockouts } from './unknown-lockout';

/** Reads the entry of KEYS[1]: {f: failures since the last lock, l: locks so far, u: lock end in seconds}. */
const READ = `${LUA_NOW}
local max, lockSeconds, idleMs = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local v = redis.call('HMGET', KEYS[1], 'f', 'l', 'u')
local untilS = tonumber(v[3]) or 0
`;

/**
 * Counts one failure (locking at `max`) with UnknownNameLockout's arithmetic, so every node counts one at a
 * time. The key expires `idleMs` after the later of the last failure and the lock's end, like the in-memory entry.
 */
const COUNT = `
local failed, locks = (tonumber(v[1]) or 0) + 1, tonumber(v[2]) or 0
if failed >= max then
  untilS = math.ceil(now / 1000 + lockSeconds * 2 ^ math.min(locks, 16))
  failed = 0
  locks = locks + 1
end
redis.call('HSET', KEYS[1], 'f', failed, 'l', locks, 'u', untilS)
redis.call('PEXPIRE', KEYS[1], math.max(0, untilS * 1000 - now) + idleMs)
`;

const RECORD = `${READ}${COUNT}return untilS
`;

/** RECORD, unless the name is locked: then nothing is counted and the lock's end is returned (else 0). */
const CLAIM = `${READ}if untilS > math.floor(now / 1000) then return untilS end
${COUNT}return 0
`;

export class RedisNameLockouts implements NameLockouts {
  private readonly record: Script;
  private readonly claimScript: Script;

  constructor(private readonly redis: Redis, private readonly policy: LockoutPolicy, private readonly prefix = 'gw:', private readonly idleMs = 24 * 3600_000) {
    this.record = defineScript(redis, 'gwUnknownNameFailure', 1, RECORD);
    this.claimScript = defineScript(redis, 'gwUnknownNameClaim', 1, CLAIM);
  }

  /** Hashed: a name of any length is one short key, and Redis never holds the names tried. */
  private key(name: string): string {
    return `${this.prefix}{ul:${sha256Hex(name).slice(0, 32)}}`;
  }

  async lockedUntil(name: string): Promise<number> {
    return Number(await this.redis.hget(this.key(name), 'u')) || 0;
  }

  async recordFailure(name: string): Promise<void> {
    await this.record([this.key(name)], [this.policy.maxFailures, this.policy.lockSeconds, this.idleMs]);
  }

  async claim(name: string): Promise<number> {
    return Number(await this.claimScript([this.key(name)], [this.policy.maxFailures, this.policy.lockSeconds, this.idleMs])) || 0;
  }
}
