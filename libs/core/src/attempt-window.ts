/**
 * Attempt limits of the account flows (login per address, password reset per address, wrong 2FA
 * codes, wrong current passwords, invalid redemption codes) as one small port: in this process
 * (SQLite mode: RateWindow, exactly as before) or shared by every node in a store that outlives a node's
 * restart and a loss of Redis's data (PostgreSQL mode: table attempt_windows), so N nodes do not allow N times
 * the attempts and a guesser waiting for a Redis restart gets no fresh ones.
 */
import { GatewayError } from './errors';
import { FifoSlots } from './fifo-slots';
import { RateWindow } from './rate-window';

export interface AttemptWindow {
  /** Estimated attempts counted in the sliding window. */
  count(key: string): Promise<number>;
  /** Counts an attempt if fewer than `limit` are counted; 0 when counted, else the seconds until one may pass. */
  hit(key: string, limit: number): Promise<number>;
  /** Forgets the key's attempts (e.g. after a success). */
  reset(key: string): Promise<void>;
}

/** Makes the window of one flow; `name` keeps flows apart in a shared store. */
export type AttemptWindows = (name: string, windowMs: number, clock?: () => number) => AttemptWindow;

/** In-process windows (one node). */
export const localWindows: AttemptWindows = (_name, windowMs, clock) => {
  const w = new RateWindow(windowMs, clock);
  return {
    count: async (key) => w.count(key),
    hit: async (key, limit) => w.hit(key, limit),
    reset: async (key) => w.reset(key),
  };
};

/**
 * Answers a refused key again from this process's memory for up to `ttlMs` (never past the refusal's own
 * retry time), so a flood on a refused key (one address hammering the login) costs one round trip to the
 * shared store per key and second instead of one per request. A refusal may thus outlive a `reset` made on
 * another node by at most `ttlMs`; this node's own `reset` forgets it at once. Bounded: the oldest of
 * `maxKeys` remembered refusals goes first.
 */
export function rememberRefusals(windows: AttemptWindows, ttlMs = 1000, maxKeys = 10_000): AttemptWindows {
  const refused = new Map<string, { limit: number; untilMs: number; retryAtMs: number }>();
  return (name, windowMs, clock = Date.now) => {
    const inner = windows(name, windowMs, clock);
    const id = (key: string) => `${name}\n${key}`;
    return {
      count: (key) => inner.count(key),
      hit: async (key, limit) => {
        const t = clock();
        const known = refused.get(id(key));
        // Only under the same limit: a refusal under one limit says nothing about a higher one.
        if (known && known.limit === limit && known.untilMs > t) return Math.max(1, Math.ceil((known.retryAtMs - t) / 1000));
        const wait = await inner.hit(key, limit);
        refused.delete(id(key));
        if (wait > 0) {
          refused.set(id(key), { limit, untilMs: t + Math.min(ttlMs, wait * 1000), retryAtMs: t + wait * 1000 });
          while (refused.size > maxKeys) refused.delete(refused.keys().next().value!);
        }
        return wait;
      },
      reset: async (key) => {
        refused.delete(id(key));
        await inner.reset(key);
      },
    };
  };
}

/**
 * Caps the shared store's work that callers nobody knows yet can start (a count or a hit: anyone may send a login
 * or a reset request from as many addresses as they have). The database store shares its pool with settlements,
 * which a metered request waits for before its answer: without a cap a flood of logins from many addresses, or a
 * database slowed on that one table, held every connection and stalled metering for everyone. Here `slots` run at
 * once per process, `queue` more wait in arrival order, and the rest get 503 `attempt_checks_busy` at once, the same
 * for every subject, before anything is counted. A reset is not capped: only a success (a right password or code)
 * makes one, and refusing it would fail that success.
 */
export function boundedWindows(windows: AttemptWindows, slots: number, queue: number): AttemptWindows {
  const gate = new FifoSlots(slots);
  const run = async <T>(fn: () => Promise<T>): Promise<T> => {
    const release = await gate.acquire(queue);
    if (!release) throw attemptChecksBusy();
    try {
      return await fn();
    } finally {
      release();
    }
  };
  return (name, windowMs, clock) => {
    const inner = windows(name, windowMs, clock);
    return {
      count: (key) => run(() => inner.count(key)),
      hit: (key, limit) => run(() => inner.hit(key, limit)),
      reset: (key) => inner.reset(key),
    };
  };
}

const attemptChecksBusy = () => new GatewayError(503, 'attempt_checks_busy', 'Too many sign-in attempts are being checked on this server; try again shortly', {
  headers: { 'retry-after': '1' },
});
