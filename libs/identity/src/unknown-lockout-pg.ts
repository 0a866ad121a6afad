import { sha256Hex } from '@gw/core';
import type { PgSql } from '@gw/db/pg';
import { countFailure, type LockoutPolicy, type NameLockouts } from './unknown-lockout';

/** Claims between sweeps of expired rows (the table stays bounded by the names tried within a day). */
const SWEEP_EVERY = 1024;

/**
 * Unknown-name lockouts of PostgreSQL mode, in table name_lockouts (migration pg/0021): counted by every node
 * together, and, like an account's counters in its users row, not reset by a loss of Redis's data (they lived
 * in Redis, where a FLUSHALL or an empty restart unlocked every name and told locked real names from unknown
 * ones, which stayed 429). A claim costs what a real account's does (SecurityStore.claimLoginAttempt): one
 * transaction with the row locked, so concurrent claims on every node see each other's counts.
 */
export class PgNameLockouts implements NameLockouts {
  private claims = 0;

  constructor(private readonly sql: PgSql, private readonly policy: LockoutPolicy, private readonly idleMs = 24 * 3600_000) {}

  async claim(name: string, nowMs: number): Promise<number> {
    if (++this.claims % SWEEP_EVERY === 0) void this.sql`delete from name_lockouts where expires_ms < ${nowMs}`.catch(() => {});
    // Hashed: a name of any length is one short key, and the database never holds the names tried.
    const key = sha256Hex(name);
    return this.sql.begin(async (tx) => {
      // Creates the row or locks the one there (the no-op update), returning what it held.
      const [row] = await tx<{ failed: number; locks: number; locked_until: string; expires_ms: string }[]>`
        insert into name_lockouts (name_hash, failed, locks, locked_until, expires_ms) values (${key}, 0, 0, 0, 0)
        on conflict (name_hash) do update set name_hash = excluded.name_hash
        returning failed, locks, locked_until, expires_ms`;
      // Idle past its expiry: forgotten, as the in-process counter forgets it.
      const live = Number(row!.expires_ms) >= nowMs ? { failed: row!.failed, locks: row!.locks, lockedUntil: Number(row!.locked_until) } : undefined;
      if (live && live.lockedUntil > Math.floor(nowMs / 1000)) return live.lockedUntil;
      const next = countFailure(live, this.policy, nowMs);
      await tx`update name_lockouts set failed = ${next.failed}, locks = ${next.locks}, locked_until = ${next.lockedUntil},
        expires_ms = ${Math.max(nowMs, next.lockedUntil * 1000) + this.idleMs} where name_hash = ${key}`;
      return 0;
    }) as Promise<number>;
  }
}
