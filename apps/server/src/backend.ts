/**
 * The storage backend, chosen once from DATABASE_URL: SQLite in-process (journal, local bus, always
 * leader) or PostgreSQL + Redis (group-commit settlement, change feed, advisory-lock leader, Redis
 * limits). Services only see the ports this returns; nothing else branches on the database kind.
 */
import { ConfigError, type Config } from '@gw/config';
import { AlwaysLeader, LocalChangeFeed, boundedWindows, errorText, rememberRefusals, type AttemptWindows, type ChangeBus, type Leader, type Logger, type RateLimits } from '@gw/core';
import { createStores, inlineHistoryListings, inlineStatsReader, openDatabase, workerHistoryListings, workerStatsReader, type DbHandle, type HistoryListings, type StatsReader, type Stores } from '@gw/db';
import type { PgGroupCommitter, PgHandle } from '@gw/db/pg';
import type { RelayWiring } from '@gw/relay';
import { HoldReconciler, LiveHolds, billingConfig, followBalances, journalDirOf, type HoldStore, type SharedHolds, type UnfinishedBilling } from '@gw/billing';
import type { LockoutPolicy, NameLockouts } from '@gw/identity';

/**
 * Attempt-window statements (login and reset per address, logins per username, ...) running at once per process in
 * PostgreSQL mode, of the pool's 10 connections: an attempt takes well under a millisecond, so two run some
 * thousands a second, and the other eight stay free for settlements and the rest. Waiting for them costs no
 * connection, so the queue (ATTEMPT_CHECKS_QUEUE) is long: a burst is slowed, and refused only past it.
 */
const ATTEMPT_DB_SLOTS = 2;

export interface Backend {
  kind: 'sqlite' | 'postgres';
  stores: Stores;
  /** The SQLite database (SQLite mode only: tests and tools that read it directly). */
  dbh: DbHandle | null;
  /** The PostgreSQL pool (PostgreSQL mode only). */
  pg: PgHandle | null;
  /** What the relay's wiring takes from the backend: settlement path, limits, leader. */
  relay: Pick<RelayWiring, 'stores' | 'durable' | 'checkpoints' | 'holds' | 'journalDir' | 'rateLimits' | 'leader'>;
  /** Request and attempt limits shared by every node (Redis) or kept in this process. */
  rateLimits: RateLimits | null;
  leader: Leader;
  /**
   * Failed logins of unknown usernames, counted by every node in the database (PostgreSQL mode); null = in this
   * process. Never in Redis: a loss of its data would unlock every name.
   */
  nameLockouts: ((policy: LockoutPolicy) => NameLockouts) | null;
  /**
   * Account-flow attempt limits (login, reset, 2FA, current password, redeem) shared by every node in the database
   * (PostgreSQL mode), for the same reason; null = in this process.
   */
  attemptWindows: AttemptWindows | null;
  /**
   * A short per-key lock shared by every node (PostgreSQL mode: Redis), for flows whose attempts must run one at a time
   * in the cluster (a user's redemption attempts); null = this process serialises alone.
   */
  sharedKeyLock: ((key: string) => Promise<(() => Promise<void>) | null>) | null;
  /** PostgreSQL mode: the shared admission (holds in Redis), its renewals and the leader's reconciler. */
  holds: SharedAdmission | null;
  /**
   * Starts following other nodes' writes (PostgreSQL: LISTEN); `reloadAll` runs after every (re)listen and
   * every CHANGE_FEED_RESYNC_MS, since notifications sent while nobody listened are lost. SQLite: nothing to follow.
   */
  follow(reloadAll: () => Promise<void>): Promise<void>;
  /**
   * Reads over the stored history (usage-log and ledger listings, export pages, statistics), each stopped after
   * HISTORY_QUERY_TIMEOUT_MS: SQLite file, in child processes of their own; PostgreSQL, under statement_timeout.
   */
  history: { listings: HistoryListings; stats: StatsReader };
  close(): Promise<void>;
}

export interface SharedAdmission {
  store: HoldStore;
  shared: SharedHolds;
  reconciler: HoldReconciler;
  /**
   * Part of every change-feed resync: the hold mirrors of users holding now, and of the users and keys whose
   * follow batch failed, read from the ledger again (a failed batch is never dropped). Throws when that fails.
   */
  resyncMirrors(): Promise<void>;
}

export async function openBackend(config: Config, bus: ChangeBus, log: Logger): Promise<Backend> {
  return config.dbKind === 'postgres' ? openPostgresBackend(config, bus, log) : openSqliteBackend(config, bus, log);
}

function openSqliteBackend(config: Config, bus: ChangeBus, log: Logger): Backend {
  const dbh = openDatabase(config.sqlitePath);
  const stores = createStores(dbh, bus);
  let feed: LocalChangeFeed | null = null;
  // A listing that counts by scanning the table (a filter without an index, a deep page) takes milliseconds per
  // 100k rows, a year's aggregate seconds; bun:sqlite would run them on this thread, so for a file they run in a
  // child process's connection. An in-memory database, which a second connection cannot open, reads inline.
  const history = config.sqlitePath !== ':memory:'
    ? { listings: workerHistoryListings(config.sqlitePath, config.historyQueryTimeoutMs), stats: workerStatsReader(config.sqlitePath, config.historyQueryTimeoutMs) }
    : { listings: inlineHistoryListings(stores), stats: inlineStatsReader(stores.usageStats) };
  return {
    kind: 'sqlite', stores, dbh, pg: null, rateLimits: null, leader: new AlwaysLeader(), nameLockouts: null, attemptWindows: null, sharedKeyLock: null, holds: null, history,
    relay: { stores, journalDir: config.sqlitePath === ':memory:' ? null : journalDirOf(config.sqlitePath) },
    // No other process writes; a cache that failed to apply one of this process's writes is reloaded.
    follow: async (reloadAll) => { feed = new LocalChangeFeed({ bus, onResync: () => reloadAll(), log }); },
    close: async () => { await feed?.close(); await history.listings.close(); await history.stats.close(); dbh.close(); },
  };
}

async function openPostgresBackend(config: Config, bus: ChangeBus, log: Logger): Promise<Backend> {
  // Loaded only in this mode: a SQLite process never pays for postgres.js, ioredis and the pg schema.
  const { openPostgres, createPgStores, pgHistoryReads, PgGroupCommitter, PgChangeFeed, PgAdvisoryLeader, claimAdmissionStart, admissionStartedAt, pgAttemptWindows, PgRealtimeUnfinished, pgUnfinishedRows } = await import('@gw/db/pg');
  const { default: Redis } = await import('ioredis');
  const { RedisRateLimits } = await import('@gw/core/redis/rate-limits');
  const { RedisKeyLocks } = await import('@gw/core/redis/key-locks');
  const { claimPrefix, prefixOwner } = await import('@gw/core/redis/prefix-owner');
  // Before the first command: on Bun, ioredis otherwise builds a trace of every command for no listener.
  (await import('@gw/core/redis/tracing')).skipUnobservedTracing();
  const { PgNameLockouts } = await import('@gw/identity/unknown-lockout-pg');
  const { RedisHoldStore, evictionRisk } = await import('@gw/billing/holds/redis');
  const url = config.databaseUrl;
  const closers: Array<() => Promise<unknown> | unknown> = [];
  const close = async () => { for (const c of closers.reverse()) await Promise.resolve(c()).catch(() => {}); };
  try {
    const pg = await openPostgres(url, { schema: config.pgSchema, silenceMs: config.pgSilenceMs });
    closers.push(() => pg.close());
    // Reconnects back off to 0.5 s at most (ioredis 6's default grows to 5 s): a command waits for two reconnect
    // attempts before it fails, so during an outage an admission got its 503 only after ~10 s (measured).
    const redis = new Redis(config.redisUrl!, {
      maxRetriesPerRequest: 2, connectTimeout: 5000, lazyConnect: true,
      // A connection that goes silent (packets dropped, nothing closed) held every command, and so every
      // admission, until TCP gave up: with commands waiting and nothing received for this long, it is replaced.
      ...(config.redisSilenceMs > 0 ? { socketTimeout: config.redisSilenceMs } : {}),
      retryStrategy: (times) => Math.min(2 ** (times - 1) * 50, 500) + Math.floor(Math.random() * 50),
    });
    redis.on('error', (err) => log.warn('redis.error', { error: err.message }));
    closers.push(() => redis.quit().catch(() => redis.disconnect()));
    // Fails start-up (one line) rather than the first request when Redis is unreachable.
    await redis.connect();
    // Said at start: an evicted hold key is money counted wrongly, with no error anywhere.
    const risk = await evictionRisk(redis);
    if (risk) log.warn('redis.eviction_risk', { msg: risk });
    const stores = createPgStores(pg.db, bus);
    // PG_SETTLE_FLUSH_MS / PG_SETTLE_BATCH / PG_SETTLE_DEADLINE_MS (validated with the billing settings).
    const billing = billingConfig(config.env);
    // Checkpoints of running realtime responses, written off the request path. Closers run in reverse: the last
    // writes (the drops of settlements the sink commits while it closes, below) are awaited after the sink closed and
    // before the pool does, for 2 s at most (a connection gone silent must not hold the rest of the shutdown).
    const checkpoints = new PgRealtimeUnfinished(pg.sql, (id, op, err) => log.error('settlement.unfinished_write_failed', { id, op, cause: errorText(err), msg: 'the leader deletes a row left once its request is settled' }));
    closers.push(() => Promise.race([checkpoints.idle(), Bun.sleep(2_000)]));
    const sink = new PgGroupCommitter(pg.db, billing.pgSettle);
    closers.push(() => sink.close());
    const leader = await PgAdvisoryLeader.start(url, { name: `gw:${config.pgSchema}:jobs`, log: (line) => log.info('leader', { msg: line }) });
    closers.push(() => leader.close());
    const rateLimits = new RedisRateLimits(redis, config.redisPrefix);
    // One step (a redemption attempt: a few queries) holds it, renewing it while it runs for 4 leases at most (a hung
    // step must not block its user's redemptions on every node); a node that dies holding one blocks its key a lease.
    const keyLocks = new RedisKeyLocks(redis, config.redisPrefix, {
      ttlMs: 15_000, waitMs: 15_000,
      onLost: (key) => log.warn('redis.key_lock_lost', { key, msg: 'a lock lapsed while held (Redis unreachable or emptied): its step runs on unserialised' }),
      onCapped: (key) => log.warn('redis.key_lock_capped', { key, msg: 'a step outlived its lock\'s 4 leases: it lapsed and the step runs on unserialised' }),
    });
    const holdStore = new RedisHoldStore(redis, (u, k) => sink.mirrors(u, k), {
      prefix: config.redisPrefix, recoveryMs: billing.holds.recoveryMs, loadBudgets: (ids) => sink.budgetSpend(ids),
    });
    // The prefix must be this database's before anything of it is read or written (see claimPrefix): checked
    // before the holds open (the leader's reconciler would release another database's holds).
    const [{ db }] = await pg.sql<{ db: string }[]>`select current_database() as db`;
    const identityOf = (startedAt: number) => `${db}/${config.pgSchema}/${startedAt}`;
    const refuse = (other: string, identity: string): never => {
      throw new ConfigError(`REDIS_PREFIX "${config.redisPrefix}" on this Redis belongs to another database or schema (${other}; this one is ${identity}): `
        + 'two gateways on one prefix would mix their users\' balances and holds. Give each its own REDIS_PREFIX (or, if this database '
        + `replaced that one on purpose, delete the Redis key "${config.redisPrefix}{owner}" and every other key of the prefix)`);
    };
    /** Claims the prefix for this database (its identity: database, schema, first start); refuses start-up when another has it. */
    const ownPrefix = async (startedAt: number): Promise<string> => {
      const identity = identityOf(startedAt);
      const other = await claimPrefix(redis, config.redisPrefix, identity);
      if (other !== null) refuse(other, identity);
      return identity;
    };
    // The first start ever on this database (no node has admitted anything, so Redis cannot have lost a hold)
    // opens the admission epoch at once; any other start without an epoch is a data loss and waits the window.
    // Inside the first start's transaction the prefix is only looked at: its identity names a `started_at` that
    // is not committed yet, and a claim written there outlived a start that failed after it (a lost connection,
    // a kill before the commit): every later start of this same database, under another `started_at`, was
    // refused as "another database". The claim is written once the start is committed.
    let wait = 0;
    let claimedAt = 0;
    const first = await claimAdmissionStart(pg.sql, async (startedAt) => {
      const other = await prefixOwner(redis, config.redisPrefix);
      if (other !== null && other !== identityOf(startedAt)) refuse(other, identityOf(startedAt));
      wait = await holdStore.recoveryLeft(0);
      claimedAt = startedAt;
    });
    const identity = await ownPrefix(first ? claimedAt : await admissionStartedAt(pg.sql));
    if (!first) wait = await holdStore.recoveryLeft();
    const holds = openSharedHolds(holdStore,
      { sink, bus, leader, log, ...billing.holds, unfinished: { rows: pgUnfinishedRows(pg.sql), settle: (row) => sink.settle(row) } });
    closers.push(() => holds.close());
    // Concurrency leases (max_concurrency, realtime sessions per key) renew themselves only every LIMIT_LEASE_MS/3
    // (40 s). After Redis lost its data admissions reopen once the holds are back (HOLD_LEASE_MS/3 + 1 s): renewed
    // on the holds' period too, the leases of requests still running are back by then, so they keep counting.
    const renewLeases = () => {
      void rateLimits.renewLive().then((n) => {
        if (n > 0) log.warn('limits.leases_restored', { count: n, msg: 'concurrency leases of requests in flight were missing from Redis (data loss) and were counted again' });
      }, (err) => log.warn('limits.renew_failed', { cause: errorText(err) }));
      // The prefix's owner goes with a data loss too: taken back, so another database's node still cannot start on it.
      void claimPrefix(redis, config.redisPrefix, identity).then((other) => {
        if (other !== null) log.error('redis.prefix_taken', { prefix: config.redisPrefix, owner: other, msg: 'another database took this REDIS_PREFIX after Redis lost its data: stop its nodes and give them their own prefix' });
      }, () => { /* Redis unreachable: tried again next period */ });
    };
    const leaseTimer = setInterval(renewLeases, Math.max(1, Math.floor(billing.holds.leaseMs / 3)));
    closers.push(() => clearInterval(leaseTimer));
    // A reconnect may mean a restarted, empty Redis: live holds and leases go back at once, not at the next renewal.
    redis.on('ready', () => { void holds.shared.live.renewNow(); renewLeases(); });
    if (wait > 0) log.info('holds.recovering', { ms: wait, msg: 'Redis has no admission epoch (data loss, or a new REDIS_PREFIX): admissions answer 503 until live holds are back' });
    let feed: { close(): Promise<void> } | null = null;
    closers.push(() => feed?.close());
    return {
      kind: 'postgres', stores, dbh: null, pg, rateLimits, leader, holds,
      history: pgHistoryReads(pg.db, config.historyQueryTimeoutMs),
      nameLockouts: (policy) => new PgNameLockouts(pg.sql, policy),
      // A refused key is answered from memory for a second: a flood on it costs no database round trip per request.
      // The rest is capped per process (ATTEMPT_DB_SLOTS of the pool, ATTEMPT_CHECKS_QUEUE waiting): a flood from many addresses
      // cannot take the connections settlements need.
      attemptWindows: rememberRefusals(boundedWindows(pgAttemptWindows(pg.sql), ATTEMPT_DB_SLOTS, config.attemptChecksQueue)),
      sharedKeyLock: (key) => keyLocks.acquire(key),
      relay: { stores, durable: sink, checkpoints, holds: holds.shared, journalDir: null, rateLimits, leader },
      async follow(reloadAll) {
        feed = await PgChangeFeed.start({
          url, schema: config.pgSchema, bus, resyncMs: config.changeFeedResyncMs, log,
          applicationName: `gateway-${process.pid}`, onResync: () => reloadAll(),
        });
      },
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}

/**
 * Shared admission for the PostgreSQL mode: this node's live holds (renewed every lease/3), the
 * mirrors of balance moves other than charges, and, on the leader only, the reconciler of lapsed holds.
 */
function openSharedHolds<S extends HoldStore>(store: S, o: {
  sink: PgGroupCommitter; bus: ChangeBus; leader: Leader; log: Logger; leaseMs: number; reconcileMs: number; unfinished: UnfinishedBilling;
}) {
  const live = new LiveHolds(store, o.leaseMs, (err) => o.log.warn('hold.renew_failed', { cause: errorText(err) }), () => {
    o.log.error('holds.lost', { msg: `holds not renewed for ${o.leaseMs / 2} ms: every metered request in flight on this node is stopped before its hold lapses` });
    void o.bus.emit('holds.lost', {});
  });
  const follower = followBalances(o.bus, store, o.sink);
  const reconciler = new HoldReconciler(store, o.sink, { intervalMs: o.reconcileMs, log: o.log, unfinished: o.unfinished });
  const unlead = reconciler.follow(o.leader);
  const shared: SharedHolds = { store, live, leaseMs: o.leaseMs };
  return {
    store, shared, reconciler, resyncMirrors: () => follower.resync(),
    async close() { await unlead(); follower.stop(); live.close(); },
  };
}
