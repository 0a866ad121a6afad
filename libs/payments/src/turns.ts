/**
 * One holder at a time per key in this process, the others waiting in arrival order (at most `maxWaiting` a key;
 * more get null). A key's gate exists only while someone holds or waits on it, so idle keys cost nothing.
 */
import { FifoSlots } from '@gw/core/fifo-slots';

export class KeyedTurns {
  private readonly gates = new Map<string, FifoSlots>();

  constructor(private readonly maxWaiting: number) {}

  /** Runs `fn` in `key`'s turn; null without running it when too many already wait. */
  async run<T>(key: string, fn: () => Promise<T>): Promise<{ value: T } | null> {
    let gate = this.gates.get(key);
    if (!gate) this.gates.set(key, (gate = new FifoSlots(1)));
    const release = await gate.acquire(this.maxWaiting);
    if (!release) return null;
    try {
      return { value: await fn() };
    } finally {
      release();
      const { running, waiting } = gate.load;
      if (running === 0 && waiting === 0 && this.gates.get(key) === gate) this.gates.delete(key);
    }
  }
}
