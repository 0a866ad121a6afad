/**
 * One holder at a time per key in this process, the others waiting in arrival order (at most `maxWaiting` a key;
 * more get null). A key's gate exists only while someone holds or waits on it, so idle keys cost nothing.
 *
 * With a `shared` lock (PostgreSQL + Redis: every node's holders of a key), the holder of this process's turn also
 * takes the key's shared lock before it runs, so one holder runs across all nodes. Without it, N nodes ran N holders
 * of a key at once. The shared lock is null when it stayed taken too long (the caller refuses, as for a full queue);
 * when its store cannot answer, the turn runs with this process's serialisation alone (`onSharedError` is told).
 */
import { FifoSlots } from '@gw/core/fifo-slots';

/** Takes a key's lock shared by every node: its release, or null when the key stayed locked too long. */
export type SharedKeyLock = (key: string) => Promise<(() => Promise<void>) | null>;

export class KeyedTurns {
  private readonly gates = new Map<string, FifoSlots>();

  constructor(
    private readonly maxWaiting: number,
    private readonly shared: SharedKeyLock | null = null,
    private readonly onSharedError: (err: unknown) => void = () => {},
  ) {}

  /** Runs `fn` in `key`'s turn; null without running it when too many already wait (or the shared lock stayed taken). */
  async run<T>(key: string, fn: () => Promise<T>): Promise<{ value: T } | null> {
    let gate = this.gates.get(key);
    if (!gate) this.gates.set(key, (gate = new FifoSlots(1)));
    const release = await gate.acquire(this.maxWaiting);
    if (!release) return null;
    try {
      let unlock: (() => Promise<void>) | null | undefined;
      try {
        unlock = this.shared ? await this.shared(key) : undefined;
      } catch (err) {
        this.onSharedError(err);
      }
      if (unlock === null) return null;
      try {
        return { value: await fn() };
      } finally {
        await unlock?.().catch(this.onSharedError);
      }
    } finally {
      release();
      const { running, waiting } = gate.load;
      if (running === 0 && waiting === 0 && this.gates.get(key) === gate) this.gates.delete(key);
    }
  }
}
