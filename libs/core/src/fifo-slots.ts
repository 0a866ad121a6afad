/**
 * At most `slots` holders at once; the others wait in arrival order. A freed slot is handed straight to the next
 * waiter, so a newcomer cannot take it in between. Shared by the gates that bound expensive work per node
 * (history reads, password hashing).
 */
export class FifoSlots {
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly slots: number) {}

  /**
   * Takes a slot, waiting for one if needed; null (at once) when `maxWaiting` callers already wait. The returned
   * release must be called when done; calling it again does nothing.
   */
  async acquire(maxWaiting = Infinity): Promise<(() => void) | null> {
    if (this.running < this.slots) this.running++;
    else if (this.waiting.length < maxWaiting) await new Promise<void>((r) => this.waiting.push(r));
    else return null;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const next = this.waiting.shift();
      if (next) next();
      else this.running--;
    };
  }

  /** Running and waiting (tests, metrics). */
  get load(): { running: number; waiting: number } {
    return { running: this.running, waiting: this.waiting.length };
  }
}
