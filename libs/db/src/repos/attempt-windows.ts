/**
 * Attempt windows kept in the SQLite database (table attempt_windows), for the limits a restart must not reset:
 * a code guesser that waits for (or causes) a restart would otherwise get a fresh day and 30 days of guesses.
 * Same counting as the in-process limits (stepWindow). Each hit is one read and one write on the caller's
 * thread, which bun:sqlite runs one at a time, so parallel hits cannot both pass a count neither had raised.
 * Only the account flows that use it touch the table; nothing on the /v1 path does.
 */
import { stepWindow, type AttemptWindows, type WindowCounter } from '@gw/core';
import type { Database } from 'bun:sqlite';
import { SWEEP_CHUNK, SWEEP_EVERY } from '../attempt-sweep';

/**
 * The sweep's statement (`?1` = now), exported so a test can read its query plan. Rows of every window length go
 * by their own expiry (idle once their window and the one after have passed), found by a range of its index, at
 * most SWEEP_CHUNK a sweep so a flood's worth of idle rows never holds the event loop at once.
 */
export const SQLITE_SWEEP = 'DELETE FROM attempt_windows WHERE rowid IN '
  + `(SELECT rowid FROM attempt_windows WHERE expires_at <= ?1 LIMIT ${SWEEP_CHUNK})`;

/** Deletes rows idle for two windows; returns how many went. */
export function sqliteSweepAttemptWindows(sqlite: Database, now: number): number {
  return sqlite.query(SQLITE_SWEEP).run(now).changes;
}

export function sqliteAttemptWindows(sqlite: Database, opts: { sweepEvery?: number } = {}): AttemptWindows {
  const sweepEvery = opts.sweepEvery ?? SWEEP_EVERY;
  const read = sqlite.query<WindowCounter, [string]>('SELECT window_ms AS windowMs, start, cur, prev FROM attempt_windows WHERE key = ?');
  const write = sqlite.query('INSERT INTO attempt_windows (key, window_ms, start, cur, prev) VALUES (?1, ?2, ?3, ?4, ?5) '
    + 'ON CONFLICT(key) DO UPDATE SET window_ms = ?2, start = ?3, cur = ?4, prev = ?5');
  const remove = sqlite.query('DELETE FROM attempt_windows WHERE key = ?');
  let hits = 0;
  return (name, windowMs, clock = Date.now) => {
    const k = (key: string) => `${name}:${key}`;
    const step = (key: string, limit: number, cost: number) => sqlite.transaction(() => {
      const t = clock();
      if (++hits % sweepEvery === 0) sqliteSweepAttemptWindows(sqlite, t);
      const { result, next } = stepWindow(read.get(k(key)) ?? undefined, { limit, windowMs, cost }, t);
      if (cost > 0 && result.ok) write.run(k(key), next.windowMs, next.start, next.cur, next.prev);
      return result;
    }).immediate();
    return {
      // A zero-cost step counts nothing: what is used is the limit less what remains.
      count: async (key) => { const r = step(key, 2 ** 31, 0); return 2 ** 31 - r.remaining; },
      hit: async (key, limit) => {
        const r = step(key, limit, 1);
        return r.ok ? 0 : Math.max(1, Math.ceil(r.retryAfterMs / 1000));
      },
      reset: async (key) => { remove.run(k(key)); },
    };
  };
}
