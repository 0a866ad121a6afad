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
  private sql: postgres.Sql;
  /** The current session asked the server to drop it when its peer goes silent (SERVER_DEAD_PEER). */
  private configured = false;
  private lastFailureLog = -Infinity;
  private leading = false;
  private busy = false;
  private closed = false;
  /** When this node last lost leadership (performance.now()); it then sits out two retry intervals. */
  private lostAt = -Infinity;
  private readonly key: number;
  private readonly listeners = new Set<(leader: boolean) => void>();
  private readonly timer: ReturnType<typeof setInterval>;

  private constructor(private readonly url: string, private readonly opts: PgLeaderOptions) {
    this.key = leaderLockKey(opts.name);
    this.sql = this.connect();
    this.timer = setInterval(() => void this.tick(), opts.retryMs ?? 5_000);
  }

  private connect(): postgres.Sql {
    const sql: postgres.Sql = connectPg(this.url, {
      max: 1,
      max_lifetime: 0,
      idle_timeout: 0,
      connect_timeout: 5,
      backoff: reconnectBackoff,
      onnotice: () => {},
      // Names the node holding the lock in pg_stat_activity (pg_locks gives only the backend's pid).
      connection: { application_name: `gateway-leader-${process.pid}` },
      // A client replaced after a silent death closes later: that is no news about the current one.
      onclose: () => {
        if (sql !== this.sql) return;
        this.configured = false;
        this.lose('its connection closed');
      },
    });
    return sql;
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
        const held = await this.answered(this.holds());
        if (held === 'timeout') this.lose('its lock check got no answer (connection silently dead?)');
        else if (!held) this.lose('the lock is no longer held by this session');
        return;
      }
      // A node whose session just died lets a follower take over first (each tries within one interval),
      // rather than racing it with a fresh connection; alone, it leads again after the pause.
      if (performance.now() - this.lostAt < 2 * (this.opts.retryMs ?? 5_000)) return;
      if (!this.configured && (await this.answered(this.askServerToDropSilentPeer())) === 'timeout') return;
      const rows = await this.answered(this.sql<{ ok: boolean }[]>`select pg_try_advisory_lock(${LOCK_NAMESPACE}::int, ${this.key}::int) as ok`);
      if (rows !== 'timeout' && rows[0]?.ok && !this.closed) this.set(true);
    } catch (err) {
      const why = `leader connection failed: ${err instanceof Error ? err.message : String(err)}`;
      if (this.leading) this.lose(why);
      else if (performance.now() - this.lastFailureLog > 60_000) {
        // A follower that cannot even try is worth a line (at most one a minute): if every node is in that
        // state, nothing leads.
        this.lastFailureLog = performance.now();
        this.opts.log?.(`cannot contend for ${this.opts.name}: ${why}`);
      }
    } finally {
      this.busy = false;
    }
  }

  /**
   * A node that vanishes without closing its connection (power loss, partition) would keep the lock until the
   * server's TCP keepalive gives up (about 2 h by default), and no node would lead meanwhile: the session asks the
   * server to drop it after 5 s idle + 3 unanswered probes 5 s apart, or 20 s of unacknowledged data. Set per
   * session rather than as startup parameters, which a pooler in front of PostgreSQL may refuse; a server that
   * refuses them (before PostgreSQL 12) is logged once and the lock still works, with the server's defaults.
   */
  private async askServerToDropSilentPeer(): Promise<void> {
    try {
      await this.sql.unsafe(`select ${Object.entries(SERVER_DEAD_PEER).map(([k, v]) => `set_config('${k}', '${v}', false)`).join(', ')}`);
    } catch (err) {
      this.opts.log?.(`could not set dead-peer detection on the leader's session: ${err instanceof Error ? err.message : String(err)}`);
    }
    this.configured = true;
  }

  /**
   * A query on a silently dead connection never settles (the client's own keepalive takes minutes to notice), and
   * the next one would queue behind it on this one-connection client. So after no answer in time the node stops
   * leading (rather than run leader jobs beside the node the server hands the lock to) and gets a new client: the
   * next try contends on a fresh session.
   */
  private async answered<T>(query: Promise<T>): Promise<T | 'timeout'> {
    const ms = this.opts.checkTimeoutMs ?? Math.max(2 * (this.opts.retryMs ?? 5_000), 5_000);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<'timeout'>((resolve) => { timer = setTimeout(() => resolve('timeout'), ms); });
    query.catch(() => {}); // settled later (or never) after a timeout: not an unhandled rejection
    try {
      const out = await Promise.race([query, late]);
      if (out === 'timeout') {
        const dead = this.sql;
        this.sql = this.connect();
        this.configured = false;
        void dead.end({ timeout: 0 }).catch(() => {});
      }
      return out;
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
