import { GatewayError } from './errors';
import { FifoSlots } from './fifo-slots';

export interface HistoryReadLimits {
  /** History reads one caller may have queued or running on this node; more are 429 at once. */
  perCaller: number;
  /**
   * History queries running at once on this node. SQLite runs them one at a time anyway (on a worker thread
   * for a database file, on the request thread for ':memory:'); PostgreSQL on pool connections the settlements
   * also need.
   */
  slots: number;
  /**
   * Reads that may wait for a slot node-wide (callers' shares together); one more is refused at once, 503
   * `history_busy`. An export's next page is never refused here: its reader already holds its share.
   */
  queue?: number;
}

/** Resolves after the event loop has polled its sockets once (a macrotask, unlike a resolved promise). */
const nextTurn = () => new Promise<void>((r) => setImmediate(r));

/**
 * Admission for management reads whose cost grows with the stored history (usage logs, their statistics
 * and export, the ledger). Each such query is bounded by the rows it may look at, but those can be a
 * user's million requests, and every caller may send many at once: on SQLite each query runs on the request
 * thread, so a burst of them made every relayed request wait for all of them; on PostgreSQL they took the
 * pool connections the settlements commit on. Here each caller holds at most `perCaller` of them (the rest
 * are refused at once, which costs nothing), they run `slots` at a time node-wide (waiting ones served in turn
 * by caller), and each waits for the next event-loop turn before it runs, so requests that arrived meanwhile are
 * served between two of them.
 */
export class HistoryReadGate {
  private readonly held = new Map<number, number>();
  private readonly slots: FifoSlots;

  constructor(private readonly limits: HistoryReadLimits) {
    this.slots = new FifoSlots(limits.slots);
  }

  /** Counts one read for `caller` until `leave`; 429 `too_many_requests` when it already holds its share. */
  enter(caller: number): void {
    const n = this.held.get(caller) ?? 0;
    if (n >= this.limits.perCaller) {
      throw new GatewayError(429, 'too_many_requests', `At most ${this.limits.perCaller} history reads (usage logs, statistics, exports, ledger) per caller at a time; wait for one to finish`, {
        headers: { 'retry-after': '1' },
      });
    }
    this.held.set(caller, n + 1);
  }

  leave(caller: number): void {
    const n = (this.held.get(caller) ?? 1) - 1;
    if (n > 0) this.held.set(caller, n);
    else this.held.delete(caller);
  }

  /**
   * Runs one query in a node-wide slot, after the next event-loop turn. Waiting queries are served round-robin by
   * `caller`, so one caller's queued reads (its 4, an export's next page) hold another's back by one of theirs per
   * freed slot, not all of them.
   */
  async query<T>(fn: () => T | Promise<T>, caller?: number, maxWaiting = Infinity): Promise<T> {
    const release = await this.slots.acquire(maxWaiting, caller);
    if (!release) {
      throw new GatewayError(503, 'history_busy', `Too many history reads (usage logs, statistics, exports, ledger) waiting on this server; try again shortly`, {
        headers: { 'retry-after': '1' },
      });
    }
    try {
      await nextTurn();
      return await fn();
    } finally {
      release();
    }
  }

  /** `enter`, one query (refused when the node's queue is full), `leave`. */
  async run<T>(caller: number, fn: () => T | Promise<T>): Promise<T> {
    this.enter(caller);
    try {
      return await this.query(fn, caller, this.limits.queue ?? Infinity);
    } finally {
      this.leave(caller);
    }
  }

  /** Queries running and waiting for a slot on this node (tests, metrics). */
  get load(): { running: number; waiting: number } {
    return this.slots.load;
  }

  /** Reads held by `caller` (tests, metrics). */
  heldBy(caller: number): number {
    return this.held.get(caller) ?? 0;
  }
}
