/**
 * Re-reads of changed records, coalesced: keys asked for while a re-read runs are read together in the next
 * one (one query per burst, not one per record). A burst of N changes heard from another node (a bulk insert
 * announces each row) cost N round trips applied one after another; now it costs a few.
 *
 * Never loses a change: a key asked for is read by a batch that starts after the ask, so the read sees the
 * write that made the ask (notifications arrive after their commit). Batches run one at a time, in order, so
 * an older read never overwrites a newer one (as SerialQueue). `null` asks for everything: the pending batch
 * becomes a full reload, which covers every key pending with it.
 * Each ask resolves when its batch is applied, and rejects with that batch's error: the same error for every ask of
 * the batch, so whoever reports failures can tell one failed batch from many (see failedBatchSize).
 */
export class BatchedRefresh<K> {
  private keys = new Set<K>();
  private everything = false;
  private next: { promise: Promise<void>; resolve: () => void; reject: (err: unknown) => void } | null = null;
  private running = false;

  constructor(private readonly apply: (keys: K[] | null) => Promise<void>) {}

  run(key: K | null): Promise<void> {
    if (key === null) this.everything = true;
    else this.keys.add(key);
    if (!this.next) {
      let resolve!: () => void;
      let reject!: (err: unknown) => void;
      const promise = new Promise<void>((res, rej) => { resolve = res; reject = rej; });
      this.next = { promise, resolve, reject };
      // A microtask later: asks made in the same turn (notifications parsed from one socket read) share it.
      if (!this.running) queueMicrotask(() => void this.drain());
    }
    return this.next.promise;
  }

  private async drain(): Promise<void> {
    if (this.running) return;
    this.running = true;
    while (this.next) {
      const batch = this.next;
      const keys = this.everything ? null : [...this.keys];
      this.next = null;
      this.keys = new Set();
      this.everything = false;
      try {
        await this.apply(keys);
        batch.resolve();
      } catch (err) {
        if (typeof err === 'object' && err !== null) failedBatches.set(err, keys === null ? 'all' : keys.length);
        batch.reject(err);
      }
    }
    this.running = false;
  }
}

const failedBatches = new WeakMap<object, number | 'all'>();

/**
 * How many keys the batch that failed with `err` was re-reading ('all': a full reload); undefined when `err` did not
 * come from a BatchedRefresh. Every ask of that batch rejects with this very error: a change feed logs it once.
 */
export function failedBatchSize(err: unknown): number | 'all' | undefined {
  return typeof err === 'object' && err !== null ? failedBatches.get(err) : undefined;
}
