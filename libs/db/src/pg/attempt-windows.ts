/**
 * Attempt windows kept in PostgreSQL (table attempt_windows, migration pg/0021), for PostgreSQL mode: shared by
 * every node, and not reset by a loss of Redis's data (FLUSHALL, a Redis restart without persistence, a
 * failover to an empty replica), which handed a guesser waiting for one a fresh budget. Same counting as
 * SQLite's table and the in-process limits (stepWindow). A hit is one statement: an upsert whose conflict branch
 * counts only while the estimate leaves room, so concurrent hits on every node are ordered by the row lock and
 * none passes a count another had already raised (a first hit racing another waits on the unique index).
 * Only the account flows use it (login, reset, 2FA, current password, redeem); nothing on the /v1 path does.
 */
import { stepWindow, type AttemptWindows } from '@gw/core';
import { SWEEP_CHUNK, SWEEP_EVERY } from '../attempt-sweep';
import type { PgSql } from './client';

const COUNT_ALL = 2 ** 31;

/**
 * The sweep's statement (`$1` = now), exported so a test can read its query plan: rows idle for two windows by
 * their expiry (generated column, migration pg/0024), found by a range of its index, at most SWEEP_CHUNK a sweep
 * so one sweep never holds a pooled connection long. By physical row (ctid), not key: about 3 ms a chunk against
 * 35 ms for a lookup per key. A row a concurrent hit renews while the delete waits for its lock is kept by the
 * outer expiry condition, which PostgreSQL rechecks on the renewed row (the ctid match alone is not rechecked by
 * released versions up to at least 17, and deleted the renewed row).
 */
export const PG_SWEEP = 'delete from attempt_windows where ctid = any(array('
  + `select ctid from attempt_windows where expires_at <= $1 limit ${SWEEP_CHUNK})) and expires_at <= $1`;

/** Deletes rows idle for two windows; resolves to how many went. */
export async function pgSweepAttemptWindows(sql: PgSql, now: number): Promise<number> {
  return (await sql.unsafe(PG_SWEEP, [now])).count;
}

export function pgAttemptWindows(sql: PgSql, opts: { sweepEvery?: number } = {}): AttemptWindows {
  const sweepEvery = opts.sweepEvery ?? SWEEP_EVERY;
  let hits = 0;
  return (name, windowMs, clock = Date.now) => {
    const k = (key: string) => `${name}:${key}`;
    const read = async (key: string) => {
      const [row] = await sql<{ start: string; cur: number; prev: number; window_ms: string }[]>`
        select window_ms, start, cur, prev from attempt_windows where key = ${k(key)}`;
      return row ? { windowMs: Number(row.window_ms), start: Number(row.start), cur: row.cur, prev: row.prev } : undefined;
    };
    return {
      count: async (key) => COUNT_ALL - stepWindow(await read(key), { limit: COUNT_ALL, windowMs, cost: 0 }, clock()).result.remaining,
      hit: async (key, limit) => {
        const t = clock();
        if (++hits % sweepEvery === 0) void pgSweepAttemptWindows(sql, t).catch(() => {});
        const start = t - (t % windowMs);
        const retry = Math.max(1, Math.ceil((start + windowMs - t) / 1000));
        if (limit < 1) return retry;
        // The row's counts as this window sees them (stepWindow): its own window's, or the one before as `prev`. A row
        // already in the next window (another node's clock is past the edge this one has not reached) is taken as it
        // is, its window kept and its previous one counted whole: moved back, it matched neither window and its
        // counts started again from 1, so hits alternating between two such nodes around every edge were never refused.
        // A row further ahead (a clock hours off) starts again as before: kept, it pinned the key's counts whole for
        // as long as the skew lasted, and its expiry kept it from the sweep.
        const same = sql`a.window_ms = ${windowMs} and a.start between ${start} and ${start + windowMs}`;
        const cur = sql`(case when ${same} then a.cur else 0 end)`;
        const prev = sql`(case when ${same} then a.prev when a.window_ms = ${windowMs} and a.start = ${start - windowMs} then a.cur else 0 end)`;
        // windowEstimate, in float8 like JS's numbers, so both sides floor the same value.
        const weight = sql`(case when ${same} and a.start > ${start} then 1 else ${1 - (t - start) / windowMs}::float8 end)`;
        const startAfter = sql`(case when ${same} then a.start else ${start} end)`;
        const counted = await sql.begin(async (tx) => {
          // Not waiting for the WAL flush (about 4 ms a commit on the test machine's disk, against 0.5 ms for the
          // whole transaction without): a hit is not money, and what a database crash can lose is the last fraction
          // of a second of counts, never a whole budget. Other writes keep their durable commits.
          await tx`set local synchronous_commit = off`;
          return tx`
            insert into attempt_windows as a (key, window_ms, start, cur, prev) values (${k(key)}, ${windowMs}, ${start}, 1, 0)
            on conflict (key) do update set window_ms = ${windowMs}, start = ${startAfter}, cur = ${cur} + 1, prev = ${prev}
            where floor(${cur}::float8 + ${prev}::float8 * ${weight}) + 1 <= ${Math.min(limit, COUNT_ALL)}
            returning 1`;
        });
        if (counted.length) return 0;
        // Refused: when a retry would pass, as stepWindow answers it (the window's end is wrong both ways: the
        // previous window may fade well before it, and a full one still weighs almost whole just after it).
        const after = stepWindow(await read(key), { limit, windowMs }, t).result;
        return after.ok ? retry : Math.max(1, Math.ceil(after.retryAfterMs / 1000));
      },
      reset: async (key) => { await sql`delete from attempt_windows where key = ${k(key)}`; },
    };
  };
}
