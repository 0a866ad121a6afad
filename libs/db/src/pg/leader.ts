import type postgres from 'postgres';
import { connectPg } from './connect';
import type { Leader } from '@gw/core';
import { reconnectBackoff } from './reconnect';

export interface PgLeaderOptions {
  /** What is led; one lock per name per database (include the schema when several clusters share one). */
  name: string;
  /** How often a follower tries to take the lock and the leader checks it still holds it. Default 5000 ms. */
  retryMs?: number;
  /** A leader whose check gets no answer this long stops leading. Default max(2 × retryMs, 5000) ms. */
  checkTimeoutMs?: number;
  log?: (line: string) => void;
}

/** First key of the two-key advisory lock space: ours, so other users of advisory locks never collide. */
const LOCK_NAMESPACE = 0x67770001;

/** Server-side dead-peer detection for the leader's session (TCP connections only; PostgreSQL ignores them on a socket). */
export const SERVER_DEAD_PEER = { tcp_keepalives_idle: '5', tcp_keepalives_interval: '5', tcp_keepalives_count: '3', tcp_user_timeout: '20000' };

/** A stable positive int4 for a name (FNV-1a), the lock's second key. */
export function leaderLockKey(name: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193);
  return (h >>> 0) & 0x7fffffff;
}

/**
 * Leadership through `pg_try_advisory_lock` on a connection of its own. The lock is PostgreSQL's
 * to release: when that session dies (node killed, connection cut, `pg_terminate_backend`),
 * another node's next try gets it; no TTL to tune.
 *
 * Why not `sql.reserve()` on the shared pool: in postgres.js 3.4.9 a reserved connection whose
 * session was terminated never settles its next query and throws an uncaught TypeError
 * (`socket.write` on null) from a timer; and pool connections are recycled after 30–60 min
 * (`max_lifetime`), which would drop the lock. Here the client has one connection, no lifetime
 * limit, and its `onclose` ends leadership at once; the leader also checks every `retryMs` that
 * its session holds the lock (the client reconnects by itself, and a new session holds nothing).
 */
export class PgAdvisoryLeader implements Leader {
  private readonly sql: postgres.Sql;
  private leading = false;
  private busy = false;
  private closed = false;
  /** When this node last lost leadership (performance.now()); it then sits out two retry intervals. */
  private lostAt = -Infinity;
  private readonly key: number;
  private readonly listeners = new Set<(leader: boolean) => void>();
  private readonly timer: ReturnType<typeof setInterval>;

  private constructor(url: string, private readonly opts: PgLeaderOptions) {
    this.key = leaderLockKey(opts.name);
    this.sql = connectPg(url, {
      max: 1,
      max_lifetime: 0,
      idle_timeout: 0,
      connect_timeout: 5,
      backoff: reconnectBackoff,
      onnotice: () => {},
      connection: {
        // Names the node holding the lock in pg_stat_activity (pg_locks gives only the backend's pid).
        application_name: `gateway-leader-${process.pid}`,
        // A node that vanishes without closing its connection (power loss, partition) would keep the lock until the
        // server's TCP keepalive gives up (about 2 h by default), and no node would lead meanwhile. The server drops
        // this session after 5 s idle + 3 unanswered probes 5 s apart, or 20 s of unacknowledged data.
        ...SERVER_DEAD_PEER,
      },
      onclose: () => this.lose('its connection closed'),
    });
    this.timer = setInterval(() => void this.tick(), opts.retryMs ?? 5_000);
  }

  /** Starts contending; resolves after the first attempt (so a lone node leads at once). */
  static async start(url: string, opts: PgLeaderOptions): Promise<PgAdvisoryLeader> {
    const leader = new PgAdvisoryLeader(url, opts);
    await leader.tick();
    return leader;
  }

  get isLeader(): boolean {
    return this.leading;
  }

  onChange(fn: (leader: boolean) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  private async tick(): Promise<void> {
    if (this.busy || this.closed) return;
    this.busy = true;
    try {
      if (this.leading) {
        const held = await this.withinCheckTimeout(this.holds());
        if (held === 'timeout') this.lose('its lock check got no answer (connection silently dead?)');
        else if (!held) this.lose('the lock is no longer held by this session');
        return;
      }
      // A node whose session just died lets a follower take over first (each tries within one interval),
      // rather than racing it with a fresh connection; alone, it leads again after the pause.
      if (performance.now() - this.lostAt < 2 * (this.opts.retryMs ?? 5_000)) return;
      const [row] = await this.sql<{ ok: boolean }[]>`select pg_try_advisory_lock(${LOCK_NAMESPACE}::int, ${this.key}::int) as ok`;
      if (row?.ok && !this.closed) this.set(true);
    } catch (err) {
      this.lose(`leader connection failed: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      this.busy = false;
    }
  }

  /**
   * The check on a silently dead connection never settles (the client's own keepalive takes minutes to notice):
   * this node stops leading instead of running leader jobs beside the node the server hands the lock to.
   */
  private async withinCheckTimeout<T>(check: Promise<T>): Promise<T | 'timeout'> {
    const ms = this.opts.checkTimeoutMs ?? Math.max(2 * (this.opts.retryMs ?? 5_000), 5_000);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<'timeout'>((resolve) => { timer = setTimeout(() => resolve('timeout'), ms); });
    check.catch(() => {}); // settled later (or never) after a timeout: not an unhandled rejection
    try {
      return await Promise.race([check, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  private async holds(): Promise<boolean> {
    const [row] = await this.sql<{ n: number }[]>`
      select count(*)::int as n from pg_locks
      where locktype = 'advisory' and granted and pid = pg_backend_pid()
        and classid = ${LOCK_NAMESPACE}::oid and objid = ${this.key}::oid and objsubid = 2`;
    return (row?.n ?? 0) > 0;
  }

  private lose(why: string): void {
    if (!this.leading) return;
    this.lostAt = performance.now();
    this.opts.log?.(`leadership of ${this.opts.name} lost: ${why}`);
    this.set(false);
  }

  private set(leading: boolean): void {
    this.leading = leading;
    for (const fn of this.listeners) fn(leading);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    for (let i = 0; i < 200 && this.busy; i++) await Bun.sleep(5);
    if (this.leading) await this.sql`select pg_advisory_unlock(${LOCK_NAMESPACE}::int, ${this.key}::int)`.catch(() => {});
    if (this.leading) this.set(false);
    await this.sql.end({ timeout: 1 });
  }
}
