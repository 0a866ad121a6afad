import type { Redis } from 'ioredis';
import { defineScript, type Script } from './script';

/** Deletes the lock only while it is still this holder's (its lapse may have let another take it). */
const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`;

/**
 * Short exclusive locks shared by every node: `SET NX PX` with a random token, polled until taken or `waitMs` has
 * passed. The lock lapses after `ttlMs`, so a node that died holding one blocks the key for that long at most; a
 * holder that outlives it simply runs unlocked (the caller's own guards still hold), which is why it is kept short
 * but well above what one guarded step takes.
 */
export class RedisKeyLocks {
  private readonly releaseScript: Script;

  constructor(private readonly redis: Redis, private readonly prefix: string, private readonly opts: { ttlMs: number; waitMs: number; pollMs?: number }) {
    this.releaseScript = defineScript(redis, 'gwKeyLockRelease', 1, RELEASE);
  }

  /** The release function, or null when the key stayed locked for `waitMs`. Throws when Redis cannot answer. */
  async acquire(key: string): Promise<(() => Promise<void>) | null> {
    const k = `${this.prefix}{lk:${key}}`;
    const token = crypto.randomUUID();
    const until = Date.now() + this.opts.waitMs;
    const poll = this.opts.pollMs ?? 10;
    for (;;) {
      if ((await this.redis.set(k, token, 'PX', this.opts.ttlMs, 'NX')) === 'OK') {
        return async () => { await this.releaseScript([k], [token]); };
      }
      if (Date.now() >= until) return null;
      // Jittered, so the waiters of one key on several nodes do not poll in step.
      await Bun.sleep(poll / 2 + Math.random() * poll);
    }
  }
}
