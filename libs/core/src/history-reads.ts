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
  /** First pause of a caller after one of its queries timed out (doubling per timeout in a row); default 1000 ms. */
  timeoutPauseMs?: number;
  /** Longest such pause; default 60000 ms. */
  maxTimeoutPauseMs?: number;
}

/** A caller's run of timed-out queries: how many in a row, and until when its reads are refused. */
interface Strikes { n: number; until: number }

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
  /**
   * Callers whose last query timed out. A timed-out query held a slot (a pool connection, or the SQLite reader)
   * for the whole limit and was answered `retry-after: 1`: a caller repeating it kept the database busy for ten
   * seconds of every eleven with each of its four shares. After a timeout the caller's next reads are refused for
   * a pause doubling with each timeout in a row (1 s, 2 s, 4 s … 60 s), which costs nothing; its first query that
   * completes ends the run.
   */
  private readonly strikes = new Map<number, Strikes>();

  constructor(private readonly limits: HistoryReadLimits, private readonly now: () => number = Date.now) {
    this.slots = new FifoSlots(limits.slots);
  }

  /** 429 while `caller` pauses after a timed-out query. */
  private checkPause(caller: number): void {
    const s = this.strikes.get(caller);
    const left = s ? s.until - this.now() : 0;
    if (left <= 0) return;
    throw new GatewayError(429, 'too_many_requests', `A history query of yours ran past its time limit and was stopped: history reads are paused for ${Math.ceil(left / 1000)} s; narrow the time range or filters`, {
      headers: { 'retry-after': String(Math.ceil(left / 1000)) },
    });
  }

  /** Starts (or doubles) `caller`'s pause; returns its length in ms. */
  private strike(caller: number): number {
    const now = this.now();
    const n = (this.strikes.get(caller)?.n ?? 0) + 1;
    const first = this.limits.timeoutPauseMs ?? 1_000;
    const pause = Math.min(first * 2 ** Math.min(n - 1, 30), this.limits.maxTimeoutPauseMs ?? 60_000);
    this.strikes.set(caller, { n, until: now + pause });
    // Bounded by the callers that timed out lately: runs that ended long ago are forgotten.
    if (this.strikes.size > 1_000) {
      for (const [c, s] of this.strikes) if (now - s.until > 10 * 60_000) this.strikes.delete(c);
    }
    return pause;
  }

  /**
   * Counts one read for `caller` until `leave`; 429 `too_many_requests` when it already holds its share, or while
   * it pauses after a timed-out query.
   */
  enter(caller: number): void {
    this.checkPause(caller);
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
   * freed slot, not all of them. `opts.midRead`: a later page of a read already answered (an export streaming): the
   * caller's pause after another query's timeout does not cut it off after its 200.
   */
  async query<T>(fn: () => T | Promise<T>, caller?: number, maxWaiting = Infinity, opts: { midRead?: boolean } = {}): Promise<T> {
    const release = await this.slots.acquire(maxWaiting, caller);
    if (!release) {
      throw new GatewayError(503, 'history_busy', `Too many history reads (usage logs, statistics, exports, ledger) waiting on this server; try again shortly`, {
        headers: { 'retry-after': '1' },
      });
    }
    try {
      // A read queued behind the caller's own timed-out one is most likely the same query: refused, not run.
      if (caller !== undefined && !opts.midRead) this.checkPause(caller);
      await nextTurn();
      const started = this.now();
      const out = await fn();
      // Only a query started after the pause ends the run (not a cheap one sent beside the slow ones).
      if (caller !== undefined && (this.strikes.get(caller)?.until ?? Infinity) <= started) this.strikes.delete(caller);
      return out;
    } catch (err) {
      if (caller !== undefined && err instanceof GatewayError && err.code === 'history_timeout') {
        // Its retry-after says when the caller may read again: after the pause, not in a second.
        const pause = this.strike(caller);
        throw new GatewayError(err.status, err.code, err.message, {
          type: err.type, param: err.param, cause: err.cause, headers: { ...err.headers, 'retry-after': String(Math.ceil(pause / 1000)) },
        });
      }
      throw err;
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
