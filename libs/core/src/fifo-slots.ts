/**
 * At most `slots` holders at once; the others wait. A freed slot is handed straight to the next waiter, so a
 * newcomer cannot take it in between. Waiters are served round-robin by the key they acquire under, first come
 * first served within a key: one key with a long queue delays another key's next waiter by at most one of its own
 * per freed slot, not by its whole backlog. Waiters without a key share one, so a gate that passes none is plain
 * FIFO. Shared by the gates that bound expensive work per node (history reads, password hashing).
 */
export class FifoSlots {
  private running = 0;
  private waitingCount = 0;
  /** Each key's waiters in arrival order; a key is here only while it has some. */
  private readonly queues = new Map<unknown, (() => void)[]>();
  /** Keys with waiters, in the order their turn comes. */
  private readonly turns: unknown[] = [];

  constructor(private readonly slots: number) {}

  /**
   * Takes a slot, waiting for one if needed; null (at once) when `maxWaiting` callers already wait. The returned
   * release must be called when done; calling it again does nothing. `key` is whose turn the wait is served in.
   */
  async acquire(maxWaiting = Infinity, key?: unknown): Promise<(() => void) | null> {
    if (this.running < this.slots) this.running++;
    else if (this.waitingCount < maxWaiting) await new Promise<void>((r) => this.enqueue(key, r));
    else return null;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const next = this.dequeue();
      if (next) next();
      else this.running--;
    };
  }

  /** Running and waiting (tests, metrics). */
  get load(): { running: number; waiting: number } {
    return { running: this.running, waiting: this.waitingCount };
  }

  private enqueue(key: unknown, wake: () => void): void {
    const q = this.queues.get(key);
    if (q) q.push(wake);
    else {
      this.queues.set(key, [wake]);
      this.turns.push(key);
    }
    this.waitingCount++;
  }

  /** The first waiter of the key whose turn it is; that key goes to the back of the turns if it has more. */
  private dequeue(): (() => void) | undefined {
    if (!this.turns.length) return undefined;
    const key = this.turns.shift();
    const q = this.queues.get(key)!;
    const wake = q.shift()!;
    if (q.length) this.turns.push(key);
    else this.queues.delete(key);
    this.waitingCount--;
    return wake;
  }
}
