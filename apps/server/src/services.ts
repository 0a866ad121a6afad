/**
 * The composition root: builds every library service from the configuration. Routes receive this
 * object and never construct services themselves, so tests can start a whole gateway in-process.
 */
import type { Config } from '@gw/config';
import { ChangeBus, HistoryReadGate, SecretBox, createLogger, localWindows, type Logger } from '@gw/core';
import { sqliteAttemptWindows, type DbHandle, type HistoryListings, type StatsReader, type LedgerStore, type SecurityStore, type SessionsStore, type Stores, type UsersStore } from '@gw/db';
import { openBackend, type Backend } from './backend';
import { LoginService, ManagementAuth, PasswordGate, bootstrapRoot, usePasswordGate } from '@gw/identity';
import { ApiKeyService, CredentialEnding, CurrentPasswordGuard, UserDirectory, UserService } from '@gw/identity';
import { ChannelKeyService, ChannelRegistry, ChannelService, ChannelTester } from '@gw/channels';
import { Mailer, PasswordChangeService, PasswordResetService, SecurityNotices, TwoFactorService, mailConfig, passwordResetConfig, securityNoticesConfig, twoFactorConfig } from '@gw/identity';
import { createPayments, paymentsConfig, startOrderSweeper, type Payments } from '@gw/payments';
import { createRelayServices, type RelayServices } from '@gw/relay';
import { createMetrics, watchLoopDelay, type GatewayMetrics } from './metrics';
import { getAdapter } from '@gw/providers';
import type { ApiKeyRecord } from '@gw/identity';
import type { ChannelRecord } from '@gw/channels';
import { BudgetService, type QuotaService, type Reservation } from '@gw/billing';
import { canManage } from '@gw/identity';
import { orderCandidates } from '@gw/relay';
import { RealtimeService, SharedSessionLeases, adapterResolver, realtimeConfig, type QuotaPort } from '@gw/realtime';

export interface Services {
  config: Config;
  /** The SQLite database; null in PostgreSQL mode (read through `stores`). */
  dbh: DbHandle | null;
  /** Every storage interface, on the configured database (createStores or createPgStores). */
  stores: Stores;
  /** The chosen storage backend (SQLite, or PostgreSQL + Redis) and its cluster ports. */
  backend: Backend;
  secrets: SecretBox;
  /** Change notifications that keep the in-memory hot-path caches exact. */
  bus: ChangeBus;
  users: UsersStore;
  sessions: SessionsStore;
  ledger: LedgerStore;
  auth: ManagementAuth;
  login: LoginService;
  /** Account security: TOTP state, backup codes, reset tokens, atomic lockout counters. */
  security: SecurityStore;
  twoFactor: TwoFactorService;
  mailer: Mailer;
  /** E-mails an account's owner when a credential or 2FA changes on it (after the response). */
  notices: SecurityNotices;
  passwordReset: PasswordResetService;
  passwordChange: PasswordChangeService;
  /** The one check (and attempt limit) of a logged-in user's current password, shared by every route that asks for it. */
  currentPassword: CurrentPasswordGuard;
  /** Ending the caller's other sessions and access tokens (needs the current password, unlike logout). */
  credentialEnding: CredentialEnding;
  /** Channel administration and the in-memory channel snapshot the relay routes from. */
  channels: ChannelService;
  channelRegistry: ChannelRegistry;
  /** A channel's upstream keys (/api/channel/:id/keys) and their counters. */
  channelKeys: ChannelKeyService;
  /** POST /api/channel/:id/test: one minimal real request through the channel's adapter. */
  channelTester: ChannelTester;
  /** User administration (/api/user/ CRUD, role rules) and the in-memory user map of the request path. */
  userAdmin: UserService;
  userDirectory: UserDirectory;
  /** Relay API keys: CRUD and the in-memory lookup by key. */
  apiKeys: ApiKeyService;
  /** Top-ups: orders, provider checkouts, signed webhooks, admin balance adjustments. */
  payments: Payments;
  /** /v1/messages relay, routing health, prices, quota and usage logs. */
  relay: RelayServices;
  /** /v1/realtime WebSocket relay: admission, live sessions, metering, session records. */
  realtime: RealtimeService<ApiKeyRecord, ChannelRecord, Reservation>;
  /** Budgets and low-balance thresholds (/api/budget/), and the alert outbox. */
  budgets: BudgetService;
  /** Prometheus metrics (GET /metrics). */
  metrics: GatewayMetrics;
  /** Admission of history reads (usage logs, statistics, exports, ledger): per caller and node-wide (README: Security and limits). */
  historyReads: HistoryReadGate;
  /** Usage-log and ledger listings and export pages, time-limited (Backend.history). */
  historyListings: HistoryListings;
  /** Usage statistics queries, time-limited (Backend.history). */
  historyStats: StatsReader;
  /** The server log (LOG_LEVEL, LOG_FORMAT): every library and plugin writes through it. */
  log: Logger;
  /** Registers a shutdown step (stop timers, flush buffers) run before the database closes. */
  onClose(fn: () => void | Promise<void>): void;
  /** Stops background work (health probes, flushers) and closes the database. */
  close(): Promise<void>;
}

/** History reads (queued or running) one caller may hold on a node; a dashboard sends a few at once. */
export const HISTORY_READS_PER_CALLER = 4;
/**
 * How long a graceful stop waits for queued mail (reset e-mails, security notices and the digests gathered so far)
 * to go out; the SMTP client's own timeouts are longer, so an unreachable server cannot hold a stop for them.
 */
const MAIL_STOP_GRACE_MS = 5_000;

/** The process logger of a configuration: LOG_LEVEL and LOG_FORMAT on the standard streams. */
export const loggerFor = (config: Config): Logger => createLogger({ level: config.logLevel, format: config.logFormat });

export async function createServices(config: Config, log: Logger = loggerFor(config)): Promise<Services> {
  const bus = new ChangeBus();
  const backend = await openBackend(config, bus, log);
  const closers: Array<() => void | Promise<void>> = [];
  try {
    return await assemble(config, log, bus, backend, closers);
  } catch (err) {
    // A start-up refused after the database was opened (a late setting, say) gives back what it took: the
    // database lock or connections, Redis, and leadership, which would otherwise stay with a process that
    // never serves (a caller that retries in-process, as tests do, would find the database taken).
    for (const c of closers.reverse()) await Promise.resolve().then(c).catch(() => {});
    await backend.close().catch(() => {});
    throw err;
  }
}

async function assemble(config: Config, log: Logger, bus: ChangeBus, backend: Backend, closers: Array<() => void | Promise<void>>): Promise<Services> {
  const { stores, dbh } = backend;
  const { users, sessions, ledger, security } = stores;
  // Attempt limits (login, reset, 2FA, password change, redeem): in the database, shared by every node, in
  // PostgreSQL mode (never in Redis, whose data loss would give every guesser a fresh budget).
  const windows = backend.attemptWindows ?? localWindows;
  // Every password hash and verify of this process (login, tokens, changes, 2FA, users, resets) shares it.
  usePasswordGate(new PasswordGate({ slots: config.passwordHashSlots, queue: config.passwordHashQueue }));
  reportRootBootstrap(log, config, await bootstrapRoot(users, { username: config.rootUsername, password: config.rootPassword }));
  const secrets = new SecretBox(config.secretKey);
  const auth = new ManagementAuth(users, sessions);
  const mailer = new Mailer(mailConfig(config.env));
  if (!mailer.configured) log.info('mail.off', { msg: 'SMTP_HOST unset: password reset e-mails and security notices will not be sent' });
  closers.push(() => mailer.close());
  const notices = new SecurityNotices(mailer, securityNoticesConfig(config.env, passwordResetConfig(config.env).publicUrl), log);

  // Management: channels, users, API keys. Caches subscribe to the bus here, before any request.
  const channelSecrets = new SecretBox(config.secretKey);
  const channels = new ChannelService(stores.channels, channelSecrets, bus);
  const channelRegistry = await ChannelRegistry.load(stores.channels, channelSecrets, bus, log);
  const channelKeys = new ChannelKeyService(stores.channels, channelSecrets, bus, channels);
  // A deleted channel's key counters go with it (the registry, which hears the change first, no longer lists it).
  bus.on('channel.changed', ({ channelId }) => {
    if (channelId !== null && !channelRegistry.get(channelId)) channelKeys.stats.forget(channelId);
  });
  const currentPassword = new CurrentPasswordGuard(Date.now, windows, config.passwordChecksPerMinute);
  // Wrong 2FA codes are counted per day and 30 days: in the database (SQLite's own table; PostgreSQL's through
  // `windows`), so neither a restart nor a loss of Redis's data starts them again.
  const twoFactorWindows = dbh ? sqliteAttemptWindows(dbh.sqlite) : windows;
  const twoFactor = new TwoFactorService(users, security, secrets, twoFactorConfig(config.env), currentPassword, Date.now, twoFactorWindows);
  const userAdmin = new UserService(users, sessions, ledger, bus, currentPassword, (id) => security.endCredentials(id, {}, Math.floor(Date.now() / 1000)),
    (id) => security.voidResetTokens(id));
  const userDirectory = await UserDirectory.load(users, bus);
  const apiKeys = await ApiKeyService.load(stores.apiKeys, users, userDirectory, bus, { maxKeysPerUser: config.maxKeysPerUser });
  const metrics = createMetrics();
  if (config.loopDelaySampleMs > 0) closers.push(watchLoopDelay(metrics.registry, config.loopDelaySampleMs));
  // Reset e-mails go through a background queue. Closers run in reverse: at a stop, both mail queues (and the
  // notices' pending digests) get MAIL_STOP_GRACE_MS together to go out, before the mailer closes.
  const passwordReset = new PasswordResetService(users, security, mailer, (id) => security.endCredentials(id, {}, Math.floor(Date.now() / 1000)), passwordResetConfig(config.env), log, Date.now, {}, windows);
  closers.push(async () => { await Promise.all([passwordReset.close(MAIL_STOP_GRACE_MS), notices.stop(MAIL_STOP_GRACE_MS)]); });
  const relay = await createRelayServices({
    ...backend.relay, env: config.env, bus, apiKeys, directory: userDirectory, channels: channelRegistry,
    // Nodes sharing a database date the model catalog alike: by the database's first user (the root bootstrap).
    catalogSince: backend.kind === 'postgres' ? (await users.byId(1))?.createdAt : undefined,
    setChannelStatus: (id, status, reason) => channels.setStatus(id, status, reason), adapter: getAdapter, log,
    channelKeys: {
      refused: (id, key, reason) => channelKeys.autoDisable(id, key, reason),
      used: (id, key, ok) => channelKeys.stats.record(id, key, ok),
      reEnable: (id, key) => channelKeys.reEnable(id, key),
    },
    observeAttempt: (channelId, result) => metrics.upstream.inc({ channel: channelId, result }),
    observeSettlement: metrics.settlement,
  });
  // Closers run in reverse: alert delivery stops after the last settlements (and their alerts) are written.
  closers.push(() => relay.closeAlerts());
  closers.push(() => relay.close());
  // PostgreSQL mode: a key's realtime sessions are counted across nodes (leases in Redis, LIMIT_LEASE_MS).
  const sessionLeases = backend.rateLimits ? new SharedSessionLeases(backend.rateLimits, relay.config.limitLeaseMs) : null;
  if (sessionLeases) closers.push(() => sessionLeases.close());
  const realtime = new RealtimeService<ApiKeyRecord, ChannelRecord, Reservation>({
    config: realtimeConfig(config.env), keys: apiKeys, channels: channelRegistry,
    // The key checks of /v1/messages, plus the group's price ratio for the session's charges.
    policy: { authorize: (k, m, ip) => { const { group } = relay.gate.authorize(k, m, ip); return { group, ratio: relay.relay.policy(group).ratio }; } },
    prices: relay.prices, quota: realtimeQuota(relay.quota), billing: relay.billing, upstream: adapterResolver(getAdapter),
    sessions: stores.realtimeSessions, order: (c) => orderCandidates(c), log, inflight: relay.inflight, slots: relay.slots,
    sessionLeases: sessionLeases ?? undefined,
  });
  // Live sessions end (1001) and are recorded before the database closes.
  closers.push(() => realtime.closeAll());
  metrics.registry.gauge('gateway_channel_status', 'Channel status (1 enabled, 2 disabled by an operator, 3 auto-disabled)',
    () => channelRegistry.all().map((c) => [{ channel: c.id, name: c.name, type: c.type }, c.status]));
  metrics.registry.gauge('gateway_settlements_queued', 'Settlements journaled but not yet written to the database', () => [[{}, relay.quota.queued]]);
  metrics.registry.gauge('gateway_realtime_sessions', 'Live realtime sessions', () => [[{}, realtime.liveCount]]);
  const sharedHolds = backend.holds?.store;
  const budgets = new BudgetService(relay.budgetsRepo, relay.alertOutbox, relay.budgets, {
    // The in-memory directory and key index hold every user and key (any status), refreshed on each change.
    user: (id) => userDirectory.get(id), keyOwner: (id) => apiKeys.ownerOf(id), canManage,
  }, bus, sharedHolds ? (userId, id) => sharedHolds.budgetUsage(userId, id) : undefined);
  // Other nodes' writes: every cache follows them from here on (no-op on SQLite). A resync reloads each
  // cache in full, users first so the key index sees the refreshed accounts.
  await backend.follow(async () => {
    await userDirectory.reloadAll();
    await Promise.all([apiKeys.reloadAll(), channelRegistry.refresh(null), relay.prices.reloadAll(), relay.groups.reloadAll(), relay.quota.reloadBalances(),
      relay.budgets.reload(), backend.holds?.resyncMirrors()]);
    // A reload sends no events: requests in flight of a key or user it found revoked are stopped here.
    relay.inflight.sweep();
  });
  // Which process answered (WORKERS=N, or several nodes behind one address): each scrape names its worker.
  metrics.registry.gauge('gateway_process_info', 'This gateway process (one series; its pid and database kind)', () => [[{ pid: process.pid, backend: backend.kind }, 1]]);
  metrics.registry.gauge('gateway_upstream_slots', 'Relayed requests in flight (streams and realtime sessions until they end) and their cap, MAX_UPSTREAM_CONNECTIONS',
    () => [[{ state: 'in_use' }, relay.slots.inUse], [{ state: 'max' }, relay.slots.max]]);
  const { listings: historyListings, stats: historyStats } = backend.history;
  const payments = createPayments(paymentsConfig(config.env), { users, ledger, topupOrders: stores.topupOrders, redemptionCodes: stores.redemptionCodes, bus, windows, sharedTurns: backend.sharedKeyLock, log });
  closers.push(startOrderSweeper(payments.topups, payments.config.checkoutDeadlineSeconds, backend.leader, log));
  const services: Services = {
    relay, realtime, metrics, log, budgets, historyListings, historyStats,
    // SQLite queries run one at a time whatever the slots (on the history worker for a file, on this thread for
    // ':memory:'); PostgreSQL's take pool connections the settlements need, so two at most of its ten.
    historyReads: new HistoryReadGate({ perCaller: HISTORY_READS_PER_CALLER, slots: dbh ? 1 : 2, queue: config.historyReadsQueue }),
    channels, channelRegistry, channelKeys, userAdmin, userDirectory, apiKeys,
    channelTester: new ChannelTester(channelRegistry, channels, { slots: relay.slots }),
    config, dbh, stores, backend, users, sessions, ledger, bus,
    secrets, auth, security, twoFactor, mailer, notices,
    passwordReset, passwordChange: new PasswordChangeService(users, security, currentPassword), currentPassword,
    credentialEnding: new CredentialEnding(auth, currentPassword),
    login: new LoginService(users, sessions, {
      maxFailures: config.loginMaxFailures, lockSeconds: config.loginLockSeconds,
      ipPerMinute: config.loginIpPerMinute, sessionTtlSeconds: config.sessionTtlSeconds,
      checksPerMinute: config.passwordChecksPerMinute,
    }, security, Date.now, windows, backend.nameLockouts?.({ maxFailures: config.loginMaxFailures, lockSeconds: config.loginLockSeconds })),
    payments,
    onClose: (fn) => { closers.push(fn); },
    async close() {
      for (const c of closers.reverse()) await c();
      await backend.close();
    },
  };
  services.login.secondFactor = (user, code) => twoFactor.checkLoginCode(user, code);
  return services;
}

/**
 * The quota as realtime's port takes it: the same admission as /v1/messages (synchronous on SQLite; in
 * PostgreSQL mode a promise settled by the shared hold store, so sessions on every node draw on one balance)
 * and the settlement of each response (the commit's promise in PostgreSQL mode).
 */
function realtimeQuota(q: QuotaService): QuotaPort<ApiKeyRecord, Reservation> {
  return {
    reserve: q.reserve.bind(q), affords: q.affords.bind(q), available: q.available.bind(q), userAvailable: q.userAvailable.bind(q), keyAvailable: q.keyAvailable.bind(q), budgetLeft: q.budgetLeft.bind(q), settleNow: q.settleNow.bind(q), release: q.release.bind(q),
    checkpoint: q.keepsUnfinished ? q.checkpoint.bind(q) : undefined,
  };
}

/**
 * One start-up line about the root user, so ROOT_PASSWORD never acts (or fails to) silently: created with
 * the configured password, created with a generated one (printed once, the only time it exists in clear),
 * or ROOT_PASSWORD ignored because the database already has users. The configured secret is never printed.
 */
function reportRootBootstrap(log: Logger, config: Config, boot: Awaited<ReturnType<typeof bootstrapRoot>>) {
  const user = config.rootUsername;
  if (boot.created && boot.generatedPassword) {
    log.info('root.created', { user, password: boot.generatedPassword, msg: 'generated password, shown once; set ROOT_PASSWORD to choose it' });
  } else if (boot.created) {
    log.info('root.created', { user, msg: `root user '${user}' created with the password from ROOT_PASSWORD` });
  } else if (config.rootPassword !== undefined) {
    log.warn('root.password_ignored', { msg: 'ROOT_PASSWORD is ignored: the database already has users (reset it with: bun run --silent admin reset-root-password)' });
  }
}
