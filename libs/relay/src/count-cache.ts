/**
 * Keeps count_tokens cheap under bursts (clients send dozens at start-up, often the same body):
 * - recent upstream counts are reused, keyed by a hash of what determines them (channel, upstream
 *   model, beta header, body) and of the user asking, for `ttlMs`, at most `maxEntries` (least recently
 *   used evicted);
 * - concurrent identical requests of one user share one upstream call.
 * Entries are per user: a shared one would answer at once where an upstream call takes its time, so
 * anyone could confirm a guess of another user's exact prompt by timing their own count of it.
 * - at most `maxInflight` upstream counts per channel; beyond that the caller's fallback (the local
 *   estimate) answers at once instead of queueing behind the upstream.
 */
import { createHash } from 'node:crypto';

export interface CountCacheOptions {
  maxEntries: number;
  ttlMs: number;
  maxInflight: number;
  now?: () => number;
}

export class CountCache {
  private readonly entries = new Map<string, { value: number; at: number }>();
  private readonly pending = new Map<string, Promise<number | null>>();
  private readonly perChannel = new Map<number, number>();
  private readonly now: () => number;

  constructor(private readonly o: CountCacheOptions) {
    this.now = o.now ?? Date.now;
  }

  /** The cache key of one count: a sha256 of its inputs (the body can be megabytes; the key is 64 chars). */
  static key(parts: { userId: number; channelId: number; upstreamModel: string; beta: string; body: unknown }): string {
    return createHash('sha256').update(`${parts.userId}\n${parts.channelId}\n${parts.upstreamModel}\n${parts.beta}\n${JSON.stringify(parts.body)}`).digest('hex');
  }

  /**
   * The count for `key`: cached, shared with an identical call in flight, asked of `upstream` (null =
   * it could not count), or, when the channel is at its cap or upstream gave null, `fallback()`.
   */
  async count(channelId: number, key: string, upstream: () => Promise<number | null>, fallback: () => number): Promise<number> {
    const hit = this.entries.get(key);
    if (hit && this.now() - hit.at < this.o.ttlMs) {
      this.entries.delete(key); // re-insert: Map order is the LRU order
      this.entries.set(key, hit);
      return hit.value;
    }
    const shared = this.pending.get(key);
    if (shared) return (await shared) ?? fallback();
    const busy = this.perChannel.get(channelId) ?? 0;
    if (busy >= this.o.maxInflight) return fallback();
    this.perChannel.set(channelId, busy + 1);
    const call = upstream().catch(() => null);
    this.pending.set(key, call);
    try {
      const value = await call;
      if (value !== null) this.remember(key, value);
      return value ?? fallback();
    } finally {
      this.pending.delete(key);
      const left = (this.perChannel.get(channelId) ?? 1) - 1;
      if (left > 0) this.perChannel.set(channelId, left);
      else this.perChannel.delete(channelId);
    }
  }

  private remember(key: string, value: number): void {
    if (this.o.maxEntries <= 0) return;
    this.entries.delete(key);
    this.entries.set(key, { value, at: this.now() });
    while (this.entries.size > this.o.maxEntries) this.entries.delete(this.entries.keys().next().value!);
  }
}
