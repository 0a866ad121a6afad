/**
 * Attempt limits of the account flows (login per address, password reset per address, wrong 2FA
 * codes, wrong current passwords, invalid redemption codes) as one small port: in this process
 * (SQLite mode: RateWindow, exactly as before) or shared by every node through RateLimits (Redis),
 * so N nodes do not allow N times the attempts.
 */
import { RateWindow } from './rate-window';
import type { RateLimits } from './rate-limits';

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

/** Above any real limit, and still exact as a double inside a Lua script. */
const COUNT_ALL = 2 ** 31;

/** Windows shared by every node through `limits` (its server's clock; `clock` is not used). */
export function sharedWindows(limits: RateLimits): AttemptWindows {
  return (name, windowMs) => {
    const k = (key: string) => `att:${name}:${key}`;
    return {
      // A zero-cost hit counts nothing and reports what is left under a limit no count reaches.
      count: async (key) => COUNT_ALL - (await limits.hit(k(key), { limit: COUNT_ALL, windowMs, cost: 0 })).remaining,
      hit: async (key, limit) => {
        const r = await limits.hit(k(key), { limit: Math.min(limit, COUNT_ALL), windowMs });
        return r.ok ? 0 : Math.max(1, Math.ceil(r.retryAfterMs / 1000));
      },
      reset: (key) => limits.reset(k(key)),
    };
  };
}
