import type postgres from 'postgres';
import { connectPg } from './connect';
import { RepairBackoff, failedBatchSize, silentLogger, type ChangeBus, type ChangeFeed, type Logger, type ResyncReason } from '@gw/core';
import { reconnectBackoff } from './reconnect';

/** The NOTIFY channel the triggers of migration 0008_change_feed write to. */
export const CHANGE_CHANNEL = 'gw_changes';

export interface PgChangeFeedOptions {
  /** A direct connection (LISTEN needs a session: not through a transaction-mode pooler). */
  url: string;
  /** The schema whose changes are wanted; notifications are per database, so others' are dropped. */
  schema: string;
  /** Where changes are emitted, as if this process had written them. */
  bus: ChangeBus;
  /**
   * Reload every cache fully. Called on every (re)listen, the first included (changes committed
   * while nobody listened are lost to NOTIFY), and every `resyncMs`. Never two at once.
   */
  onResync(reason: ResyncReason): void | Promise<void>;
  /** Safety net for a notification lost in a way nobody noticed; also the heartbeat period. Default 30000 ms. */
  resyncMs?: number;
  /** Shown in pg_stat_activity for the listening session. Default `gw-change-feed`. */
  applicationName?: string;
  log?: Logger;
}

/** What a trigger sends: schema, kind of record, and its key (null = many/all). */
interface Change {
  s: string;
  t: string;
  id?: number | string | null;
  model?: string | null;
}

/**
 * Brings changes committed by other processes onto the local ChangeBus, from the table triggers'
 * `NOTIFY gw_changes` (delivered iff the writing transaction commits: no dual-write gap).
 *
 * Local writes also emit on the bus synchronously (read-your-writes), so this process hears its own
 * changes twice: the second refresh re-reads the same committed row, harmless, and cheaper than
 * tagging every write with a node id.
 *
 * Reconnection: postgres.js re-issues LISTEN when the session drops and calls back, which resyncs.
 * As a guard against a re-listen that silently failed (the database was down at that moment), every
 * `resyncMs` the feed also NOTIFYs itself a ping through a second connection; a ping not heard back
 * by the next period replaces the listening client.
 */
export class PgChangeFeed implements ChangeFeed {
  private listener: postgres.Sql | null = null;
  /** Sends the heartbeat; a different session from the listener's, so it proves delivery. */
  private sender: postgres.Sql;
  private readonly timer: ReturnType<typeof setInterval> | null;
  private readonly log: Logger;
  private closed = false;
  private live = false;
  private resyncing: Promise<void> | null = null;
  private resyncAgain: ResyncReason | null = null;
  /** A notification's refresh failed while a resync ran: one more resync is due, after the retry's wait. */
  private refreshFailedDuring = false;
  private offRefreshFailed: () => void = () => {};
  /** A refresh failure was logged since the last resync began; how many more came since (not logged). */
  private refreshLogged = false;
  private folded = 0;
  /** Failed batches' errors already logged (see emitted). */
  private readonly loggedBatches = new WeakSet<object>();
  /** A failed resync's next try (see resync) and its wait. */
  private retryTimer: ReturnType<typeof setTimeout> | null = null;
  private readonly backoff: RepairBackoff;
  private pingOutstanding: string | null = null;
  private pingSeq = 0;
  private restarting = false;
  /** Counters for tests and metrics. */
  readonly stats = { received: 0, applied: 0, foreign: 0, invalid: 0, listens: 0, resyncs: 0, restarts: 0 };

  private constructor(private readonly opts: PgChangeFeedOptions) {
    this.log = opts.log ?? silentLogger;
    this.sender = this.newSender();
    const every = opts.resyncMs ?? 30_000;
    this.backoff = new RepairBackoff(every > 0 ? every : 30_000);
    this.timer = every > 0 ? setInterval(() => void this.tick(), every) : null;
  }

  /** Resolves once LISTEN is active and the first resync has run; rejects if the database is unreachable. */
  static async start(opts: PgChangeFeedOptions): Promise<PgChangeFeed> {
    const feed = new PgChangeFeed(opts);
    // This process's own committed write that a cache failed to apply is repaired like another node's.
    feed.offRefreshFailed = opts.bus.onRefreshFailed((event, err) => {
      if (feed.closed) return;
      feed.refreshFailed();
      // One line per resync, not per failure (one per settled request while a key's re-read keeps failing).
      if (feed.refreshLogged) {
        feed.folded++;
        return;
      }
      feed.log.error('change.refresh_failed', { event, folded: feed.folded, msg: 'the write is committed; every cache is resynced' }, err);
      feed.refreshLogged = true;
      feed.folded = 0;
    });
    try {
      await feed.listen();
      await feed.settled();
    } catch (err) {
      await feed.close();
      throw err;
    }
    return feed;
  }

  private newSender(): postgres.Sql {
    return connectPg(this.opts.url, { max: 1, onnotice: () => {}, connect_timeout: 5, idle_timeout: 60, backoff: reconnectBackoff });
  }

  get listening(): boolean {
    return this.live && !this.closed;
  }

  /** Waits until no resync is running (tests; start-up). */
  async settled(): Promise<void> {
    while (this.resyncing) await this.resyncing;
  }

  private async listen(): Promise<void> {
    const sql = connectPg(this.opts.url, {
      max: 1,
      connect_timeout: 5,
      backoff: reconnectBackoff,
      onnotice: () => {},
      connection: { application_name: this.opts.applicationName ?? 'gw-change-feed' },
    });
    this.listener = sql;
    try {
      await sql.listen(CHANGE_CHANNEL, (payload) => this.receive(payload), () => this.listened());
    } catch (err) {
      if (this.listener === sql) this.listener = null;
      await sql.end({ timeout: 1 }).catch(() => {});
      throw err;
    }
    // Closed while a restart was connecting: this client must not outlive the feed.
    if (this.closed) await sql.end({ timeout: 1 }).catch(() => {});
  }

  /** Called by postgres.js after every successful LISTEN, the re-listen after a reconnect included. */
  private listened(): void {
    if (this.closed) return;
    this.live = true;
    this.stats.listens++;
    // Whatever ping was in flight may have been sent while nobody listened.
    this.pingOutstanding = null;
    if (this.stats.listens > 1) this.log.info('change_feed.relisten', { schema: this.opts.schema, listens: this.stats.listens });
    this.resync('listen');
  }

  private receive(payload: string): void {
    if (this.closed) return;
    this.stats.received++;
    let c: Change;
    try {
      c = JSON.parse(payload) as Change;
    } catch {
      this.stats.invalid++;
      this.log.warn('change_feed.invalid', { payload: payload.slice(0, 200) });
      return;
    }
    if (c?.s !== this.opts.schema) {
      this.stats.foreign++;
      return;
    }
    try {
      if (this.apply(c)) this.stats.applied++;
      else {
        this.stats.invalid++;
        this.log.warn('change_feed.unknown', { payload: payload.slice(0, 200) });
      }
    } catch (err) {
      // A failing cache must not stop the others from hearing later changes.
      this.log.error('change_feed.listener_failed', { kind: c.t }, err);
      this.refreshFailed();
    }
  }

  /**
   * A cache that failed to apply a change (its re-read was refused) still holds the row from before it: a key
   * revoked on another node stayed usable here until the next periodic resync. The notification is gone, so
   * a full resync is what applies it, tried like a failed one (see retry).
   */
  private refreshFailed(): void {
    if (this.closed || this.retryTimer) return;
    // Not at once after the running resync: with re-reads failing on every notification (each comes while a reload
    // runs), that was one full reload after another, back to back, with no wait at all.
    if (this.resyncing) this.refreshFailedDuring = true;
    else this.retry('listen');
  }

  /**
   * A listener's asynchronous refresh (a cache re-reading its row) that fails is logged like a synchronous
   * one: nobody awaits a feed's emit, so it was an unhandled rejection (seen when a notification's refresh
   * ran into the pool closing at shutdown). A failure after close() is expected and not reported.
   */
  private emitted(p: Promise<void>, kind: string): void {
    p.catch((err) => {
      if (this.closed) return;
      // A cache re-reads the changes heard together in one batch, and every one of them rejects with that batch's
      // error: one line per failed batch (with how many records it re-read), not one per notification.
      const errors: unknown[] = err instanceof AggregateError ? err.errors : [err];
      const batches = errors.map(failedBatchSize);
      if (errors.every((e, i) => batches[i] !== undefined && this.loggedBatches.has(e as object))) {
        this.refreshFailed();
        return;
      }
      errors.forEach((e, i) => batches[i] !== undefined && this.loggedBatches.add(e as object));
      const batch = batches.filter((n) => n !== undefined).join(',');
      this.log.error('change_feed.listener_failed', batch ? { kind, batch } : { kind }, err);
      this.refreshFailed();
    });
  }

  /** Emits the change on the bus; false when the payload names nothing this process knows. */
  private apply(c: Change): boolean {
    const id = typeof c.id === 'number' && Number.isSafeInteger(c.id) ? c.id : null;
    const bus = this.opts.bus;
    switch (c.t) {
      case 'users':
      case 'balance':
        // A balance move is announced by user id only: the quota cache re-reads it from the table.
        if (id === null) this.resync('listen');
        else this.emitted(bus.emit('user.changed', { userId: id }), c.t);
        return true;
      case 'api_keys':
        if (id === null) this.resync('listen');
        else this.emitted(bus.emit('apikey.changed', { keyId: id }), c.t);
        return true;
      case 'channels':
        this.emitted(bus.emit('channel.changed', { channelId: id }), c.t);
        return true;
      case 'groups':
        this.emitted(bus.emit('group.changed', { groupId: id }), c.t);
        return true;
      case 'prices':
        this.emitted(bus.emit('price.changed', { model: typeof c.model === 'string' ? c.model : null }), c.t);
        return true;
      case 'budgets':
        // Both tables are small and read whole: which budget changed does not matter.
        this.emitted(bus.emit('budget.changed', {}), c.t);
        return true;
      case 'ping':
        if (c.id === this.pingOutstanding) this.pingOutstanding = null;
        return true;
      default:
        return false;
    }
  }

  /** Runs onResync; a request while one runs is folded into one more run after it. */
  private resync(reason: ResyncReason): void {
    if (this.closed) return;
    if (this.resyncing) {
      this.resyncAgain = this.resyncAgain === 'listen' ? 'listen' : reason;
      return;
    }
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.resyncing = (async () => {
      let next: ResyncReason | null = reason;
      let failed: ResyncReason | null = null;
      while (next && !this.closed) {
        this.resyncAgain = null;
        this.refreshFailedDuring = false;
        this.refreshLogged = false;
        this.stats.resyncs++;
        try {
          await this.opts.onResync(next);
          failed = null;
        } catch (err) {
          this.log.error('change_feed.resync_failed', { reason: next }, err);
          failed = next;
        }
        next = this.resyncAgain;
      }
      if (failed) this.retry(failed);
      else if (this.refreshFailedDuring && !this.closed) this.retry('listen');
      this.refreshFailedDuring = false;
    })().finally(() => (this.resyncing = null));
  }

  /**
   * A resync that failed is the only copy of the changes missed while nobody listened (a key revoked meanwhile
   * stays usable here until one succeeds): tried again after 0.25 s, doubling up to the resync period, not only
   * at the next period. It fails when the pool's queries do while the listener is already back (a database
   * restarting, its connection slots taken by every node reconnecting at once).
   */
  private retry(reason: ResyncReason): void {
    if (this.closed) return;
    // A notification's re-read that keeps failing while the whole reload gets through must not reload every
    // cache several times a second for as long as changes come (see RepairBackoff).
    const delay = this.backoff.next();
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.resync(reason);
    }, delay);
    (this.retryTimer as { unref?: () => void }).unref?.();
  }

  private async tick(): Promise<void> {
    if (this.closed || this.restarting) return;
    if (this.pingOutstanding !== null) {
      await this.restart('a heartbeat sent one period ago was not received');
      return;
    }
    this.resync('periodic');
    const nonce = `${process.pid}-${++this.pingSeq}`;
    this.pingOutstanding = nonce;
    const ping = JSON.stringify({ s: this.opts.schema, t: 'ping', id: nonce });
    await this.sender`select pg_notify(${CHANGE_CHANNEL}, ${ping})`.catch((err) => {
      this.log.warn('change_feed.ping_failed', { error: err instanceof Error ? err.message : String(err) });
    });
  }

  /** Replaces the listening client (its successful LISTEN resyncs). */
  private async restart(why: string): Promise<void> {
    this.restarting = true;
    this.live = false;
    this.stats.restarts++;
    this.log.warn('change_feed.restart', { schema: this.opts.schema, reason: why });
    try {
      // The sender too: on a connection that silently died, its ping would queue forever.
      const old = [this.listener, this.sender];
      this.listener = null;
      this.sender = this.newSender();
      await Promise.all(old.map((c) => c?.end({ timeout: 1 }).catch(() => {})));
      this.pingOutstanding = null;
      if (!this.closed) await this.listen();
    } catch (err) {
      // Still down: the next period tries again.
      this.log.warn('change_feed.listen_failed', { error: err instanceof Error ? err.message : String(err) });
      this.pingOutstanding = 'restart-failed';
    } finally {
      this.restarting = false;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.offRefreshFailed();
    this.live = false;
    if (this.timer) clearInterval(this.timer);
    if (this.retryTimer) clearTimeout(this.retryTimer);
    await Promise.all([
      this.listener?.end({ timeout: 1 }).catch(() => {}),
      this.sender.end({ timeout: 1 }).catch(() => {}),
    ]);
    this.listener = null;
    await this.settled();
  }
}
