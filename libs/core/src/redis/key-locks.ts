import type { Redis } from 'ioredis';
import { defineScript, type Script } from './script';

/** Deletes the lock only while it is still this holder's (its lapse may have let another take it). */
const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`;

/** Extends the lease only while the lock is still this holder's: 1 extended, 0 lost. */
const RENEW = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`;

/** How many leases a holder may keep a lock in all by renewing it, unless `maxHeldMs` says otherwise. */
export const KEY_LOCK_MAX_LEASES = 4;

/**
 * Short exclusive locks shared by every node: `SET NX PX` with a random token, polled until taken or `waitMs` has
 * passed. The holder renews the lease every `ttlMs`/3 while it works, so a step slower than the lease (PostgreSQL
 * slow to answer) keeps the lock: before, it lapsed after `ttlMs` and a second node's holder ran beside the first.
 * Renewals stop once the lock has been held `maxHeldMs` (4 leases by default), and `onCapped` is told if the step is
 * still running then (its lock lapses): a step that hangs would otherwise keep its key locked on every node for as
 * long as its process lives. A node that dies holding
 * one stops renewing, so it blocks the key for `ttlMs` at most. A holder that loses the lock anyway (Redis
 * unreachable past the lease, or it lost its data, or the cap) runs on unlocked: the caller's own guards still hold
 * (a redemption credits a code once, by the ledger's unique ref), and one of `onLost` and `onCapped` is told, never both.
 */
export class RedisKeyLocks {
  private readonly releaseScript: Script;
  private readonly renewScript: Script;

  constructor(private readonly redis: Redis, private readonly prefix: string,
    private readonly opts: {
      ttlMs: number; waitMs: number; pollMs?: number; maxHeldMs?: number;
      onLost?: (key: string) => void; onCapped?: (key: string) => void;
    }) {
    this.releaseScript = defineScript(redis, 'gwKeyLockRelease', 1, RELEASE);
    this.renewScript = defineScript(redis, 'gwKeyLockRenew', 1, RENEW);
  }

  /** The release function, or null when the key stayed locked for `waitMs`. Throws when Redis cannot answer. */
  async acquire(key: string): Promise<(() => Promise<void>) | null> {
    const k = `${this.prefix}{lk:${key}}`;
    const token = crypto.randomUUID();
    const until = Date.now() + this.opts.waitMs;
    const poll = this.opts.pollMs ?? 10;
    for (;;) {
      if ((await this.redis.set(k, token, 'PX', this.opts.ttlMs, 'NX')) === 'OK') {
        const stopRenewing = this.renewWhileHeld(key, k, token);
        return async () => {
          stopRenewing();
          await this.releaseScript([k], [token]);
        };
      }
      if (Date.now() >= until) return null;
      // Jittered, so the waiters of one key on several nodes do not poll in step.
      await Bun.sleep(poll / 2 + Math.random() * poll);
    }
  }

  /**
   * Renews the lease every third of it until stopped, lost or held `maxHeldMs` (never extended past that); returns the
   * stop function.
   */
  private renewWhileHeld(key: string, k: string, token: string): () => void {
    // Exactly one of lost and capped is told: a capping renewal that finds the lock gone is a loss, not also a cap.
    let told = false;
    const tell = (hook: ((key: string) => void) | undefined) => {
      if (told) return;
      told = true;
      hook?.(key);
    };
    let capped: ReturnType<typeof setTimeout> | undefined;
    const until = Date.now() + (this.opts.maxHeldMs ?? KEY_LOCK_MAX_LEASES * this.opts.ttlMs);
    const timer = setInterval(() => {
      const left = until - Date.now();
      // The last renewal takes the lease to the cap. Told only if the step is still running when that lease ends (the
      // lock lapses under it): a step that ends within its last lease lost nothing (before, it was told at this
      // renewal, and a slow step that finished in time was logged as one running on unserialised).
      if (left <= this.opts.ttlMs) {
        clearInterval(timer);
        capped = setTimeout(() => tell(this.opts.onCapped), Math.max(0, left));
        (capped as { unref?: () => void }).unref?.();
        if (left <= 0) return;
      }
      this.renewScript([k], [token, Math.min(this.opts.ttlMs, left)]).then((ok) => {
        if (Number(ok) === 1) return;
        clearInterval(timer);
        clearTimeout(capped);
        tell(this.opts.onLost);
      }, () => {
        // Redis did not answer. Before the last renewal, more tries come before the lease lapses (a lapse is told as
        // lost then). At the last one none comes: the lease lapses up to two thirds of it before the cap, and is told
        // as capped, at the cap.
      });
    }, Math.max(1, Math.floor(this.opts.ttlMs / 3)));
    (timer as { unref?: () => void }).unref?.();
    return () => {
      clearInterval(timer);
      clearTimeout(capped);
    };
  }
}
