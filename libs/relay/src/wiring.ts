import { AlwaysLeader, MemoryRateLimits, bunFetchLimit, errorText, nowSeconds, stdLogger, readBounded, type ChangeBus, type Leader, type Logger, type RateLimits } from '@gw/core';
import { AlertDispatcher, OutboxRetention, alertWebhookConfig, billingConfig, BudgetBook, PriceBook, QuotaService, SettlementJournal, type BillingConfig, type QuotaDeps, type SharedHolds } from '@gw/billing';
import type { AlertOutboxStore, AsyncSettlementSink, BudgetChargesRepo, BudgetsStore, CheckpointStore, GroupsStore, PricesStore, SettlementSink, UnfinishedStore, UsageLogsStore } from '@gw/db';
import type { ProviderAdapter } from '@gw/providers';
import { probeRequest, type KeyRef } from '@gw/channels';
import { ModelCatalog } from './catalog';
import { SessionAffinity } from './affinity';
import { relayConfig, type RelayConfig } from './config';
import { RelayGate, type GateKey, type GateUser } from './gate';
import { ChannelHealth } from './health';
import { RelayService, type RelayChannel, type RelayDeps, type RelayKeyEvents } from './relay';
import { InflightRegistry } from './inflight';
import { GroupService } from './groups';
import { RequestLimiter } from './limits';
import { FETCH_HEADROOM, UpstreamSlots } from './upstream-slots';

/** Everything /v1/messages, /v1/models, /api/pricing/ and /api/log/ use. */
export interface RelayServices {
  config: RelayConfig;
  billing: BillingConfig;
  prices: PriceBook;
  quota: QuotaService;
  usageLogs: UsageLogsStore;
  gate: RelayGate;
  health: ChannelHealth;
  relay: RelayService;
  catalog: ModelCatalog;
  /** Requests in flight by key and user: revoking either ends them (streams and realtime sessions). */
  inflight: InflightRegistry;
  /** Groups: price ratios, routing fallbacks and group limits (/api/group/). */
  groups: GroupService;
  /** Per key/user/group rate, token and concurrency limits. */
  limiter: RequestLimiter;
  /**
   * Periodic budgets and low-balance thresholds as admission and settlement see them (in PostgreSQL
   * mode admitted through the shared holds and charged in the group commit's transaction).
   */
  budgets: BudgetBook;
  budgetsRepo: BudgetsStore;
  /** Delivers the alert outbox to ALERT_WEBHOOK_URL (stopped by `closeAlerts`, after the last settlement). */
  alerts: AlertDispatcher;
  alertOutbox: AlertOutboxStore;
  /** The process-wide cap on relayed requests in flight (MAX_UPSTREAM_CONNECTIONS): beyond it, 503 at once. */
  slots: UpstreamSlots;
  /**
   * Stops the background work; resolves once the prober and the confirmation probes stopped (their probes cut; the
   * prober's round waited for LEADER_STOP_GRACE_MS at most).
   */
  close(): Promise<void>;
  closeAlerts(): Promise<void>;
}

export interface RelayWiring {
  env: Record<string, string | undefined>;
  /** The stores this feature reads and writes (createStores in @gw/db builds them). */
  stores: {
    prices: PricesStore; groups: GroupsStore; usageLogs: UsageLogsStore;
    /** SQLite: the synchronous settlement batch and the budget charges written inside it. Absent with `durable`. */
    settlements?: SettlementSink; budgetCharges?: BudgetChargesRepo;
    /** SQLite: realtime responses running, billed at the next start if the process dies (QuotaService.checkpoint). */
    realtimeUnfinished?: UnfinishedStore;
    budgets: BudgetsStore; alertOutbox: AlertOutboxStore;
  };
  /**
   * PostgreSQL mode: settlements are awaited until committed by this sink (group commit), so there is
   * no journal; budgets are charged in its transaction.
   */
  durable?: AsyncSettlementSink;
  /**
   * PostgreSQL mode: where running realtime responses keep their checkpoint (table realtime_unfinished), billed by
   * the leader's reconciler once the hold of a dead node's response lapses (QuotaService.checkpoint).
   */
  checkpoints?: CheckpointStore;
  /** PostgreSQL mode: admission through holds every node shares (with `durable`). */
  holds?: SharedHolds;
  /** Date of every model in /v1/models (unix seconds); default this process's start. Nodes of a cluster share one. */
  catalogSince?: number;
  /** Who runs the channel prober (one node of a cluster); default this process. */
  leader?: Leader;
  /** Folder of the settlement journal; null for an in-memory database. */
  journalDir: string | null;
  bus: ChangeBus;
  apiKeys: { lookup(plainKey: string): GateKey | undefined; byId(keyId: number): GateKey | undefined };
  directory: { get(userId: number): GateUser | undefined };
  channels: {
    candidates(model: string, group: string): RelayChannel[];
    all(): RelayChannel[];
    get(id: number): RelayChannel | undefined;
    models(group: string): string[];
    serves(model: string, group: string): boolean;
  };
  setChannelStatus(id: number, status: 1 | 3, reason: string): Promise<void>;
  /** The owner of channel keys: refused keys set aside, counters, the prober's re-enable. */
  channelKeys?: RelayKeyEvents & { reEnable(channelId: number, key: KeyRef): Promise<void> };
  adapter(type: string): ProviderAdapter;
  log?: Logger;
  /** Metrics hooks: every upstream attempt, every recorded settlement. */
  observeAttempt?: RelayDeps['observeAttempt'];
  observeSettlement?: QuotaDeps['observe'];
  /** Where limits are counted; default in-process (one node). */
  rateLimits?: RateLimits;
}

/** Builds the relay and billing services (config read here, so a bad value stops start-up). */
export async function createRelayServices(w: RelayWiring): Promise<RelayServices> {
  const config = relayConfig(w.env);
  const billing = billingConfig(w.env);
  const prices = await PriceBook.load(w.stores.prices, w.bus, billing.webSearchPrice);
  const usageLogs = w.stores.usageLogs;
  const alertCfg = alertWebhookConfig(w.env);
  // A secret without its URL is almost always a URL forgotten or misspelt: alerts would go nowhere unseen.
  if (!alertCfg.url && alertCfg.secret) (w.log ?? stdLogger).warn('alert.webhook_url_unset', { msg: 'ALERT_WEBHOOK_SECRET is set but ALERT_WEBHOOK_URL is not: alerts are only logged and kept as skipped' });
  const budgetsRepo = w.stores.budgets;
  const alertOutbox = w.stores.alertOutbox;
  const budgets = new BudgetBook({ repo: budgetsRepo, charges: w.stores.budgetCharges, deliver: alertCfg.url !== null, log: w.log });
  let budgetRetry: ReturnType<typeof setTimeout> | null = null;
  let closed = false;
  const alerts = new AlertDispatcher(alertOutbox, alertCfg, w.log);
  let quota: QuotaService;
  if (w.durable) {
    // Budgets across nodes need the shared admission: without it they would be accepted and never enforced.
    if (!w.holds) throw new Error('createRelayServices: a durable sink needs the shared holds');
    await budgets.reload();
    // Another node changed a budget or threshold (the change feed); every resync reloads it too. A failed
    // read keeps the book as it was (logged) and is tried again after 0.25 s, doubling up to 30 s: the change it
    // was for is not announced again, and until it is read this node admits without it (a new budget unenforced).
    let failures = 0;
    const reloadBudgets = async (): Promise<void> => {
      try {
        await budgets.reload();
        failures = 0;
      } catch (err) {
        (w.log ?? stdLogger).error('budgets.reload_failed', { cause: errorText(err) });
        if (budgetRetry || closed) return;
        budgetRetry = setTimeout(() => { budgetRetry = null; void reloadBudgets(); }, Math.min(250 * 2 ** Math.min(failures++, 16), 30_000));
        (budgetRetry as { unref?: () => void }).unref?.();
      }
    };
    w.bus.on('budget.changed', reloadBudgets);
    quota = await QuotaService.openDurable({
      durable: w.durable, holds: w.holds, checkpoints: w.checkpoints, prices, bus: w.bus, log: w.log, observe: w.observeSettlement, budgets, onAlerts: () => alerts.poke(),
    });
  } else {
    const { settlements, budgetCharges } = w.stores;
    if (!settlements || !budgetCharges) throw new Error('createRelayServices: the SQLite settlement and budget stores are required without a durable sink');
    quota = new QuotaService({
      sink: settlements, prices, bus: w.bus,
      journal: w.journalDir ? new SettlementJournal(w.journalDir) : null, unfinished: w.journalDir ? w.stores.realtimeUnfinished : null, flushMs: billing.flushMs, log: w.log, observe: w.observeSettlement,
      budgets, onAlerts: () => alerts.poke(),
    });
  }
  // After the journal replay, which may have written alerts of its own. On PostgreSQL every node runs one:
  // an alert is claimed (compare-and-set) before each attempt, so it goes out once.
  alerts.start();
  const gate = new RelayGate({ lookup: (k) => w.apiKeys.lookup(k), user: (id) => w.directory.get(id) });
  const health = new ChannelHealth({
    all: () => w.channels.all(),
    get: (id) => w.channels.get(id),
    setStatus: w.setChannelStatus,
    probe: (id, key, signal) => probeChannel(w, id, key, config.probeTimeoutMs, signal),
    reEnableKey: w.channelKeys ? (id, key) => w.channelKeys!.reEnable(id, key) : undefined,
    log: w.log,
  }, { threshold: config.healthFailures, probeIntervalMs: config.probeIntervalMs, confirm: config.healthConfirm });
  // After the channel registry's own listener (registered before), like every later listener of the bus.
  const stopForgetting = w.bus.on('channel.changed', ({ channelId }) => health.forget(channelId));
  const groups = await GroupService.load(w.stores.groups, w.bus);
  // The prober runs on the leader only (one node of a cluster probes, not every node).
  const leader = w.leader ?? new AlwaysLeader();
  const stopProbing = health.follow(leader);
  const retention = new OutboxRetention(alertOutbox, alertCfg, w.log);
  retention.follow(leader);
  const affinity = new SessionAffinity({ ttlMs: config.affinityTtlSeconds * 1000, maxEntries: config.affinityMaxEntries, maxPerUser: config.affinityMaxPerUser });
  const limiter = new RequestLimiter(w.rateLimits ?? new MemoryRateLimits(), { leaseMs: config.limitLeaseMs });
  const relay = new RelayService({
    channels: w.channels, adapter: w.adapter, prices, quota, health, billing, config, affinity, observeAttempt: w.observeAttempt,
    keys: w.channelKeys, log: w.log, groups, limiter,
  });
  // Never more than Bun's fetch slots (fixed when the process started): past them a request would queue silently.
  const fetchSlots = Math.max(1, bunFetchLimit() - FETCH_HEADROOM);
  if (config.maxUpstreamConnections > fetchSlots && w.env.MAX_UPSTREAM_CONNECTIONS !== undefined) {
    (w.log ?? stdLogger).warn('relay.upstream_cap_lowered', { configured: config.maxUpstreamConnections, effective: fetchSlots,
      msg: 'MAX_UPSTREAM_CONNECTIONS exceeds the fetch slots Bun was started with (BUN_CONFIG_MAX_HTTP_REQUESTS - 64); start with `bun run start` or raise BUN_CONFIG_MAX_HTTP_REQUESTS' });
  }
  const slots = new UpstreamSlots(Math.min(config.maxUpstreamConnections, fetchSlots), config.maxUpstreamPerUser);
  const catalog = new ModelCatalog({ channels: w.channels, adapter: w.adapter, counting: config.counting, since: w.catalogSince, routeGroups: (g) => relay.routeGroups(g) });
  // Built after the key index and user directory subscribed to the bus, so it reads their refreshed state.
  const inflight = new InflightRegistry({
    bus: w.bus,
    keyActive: (id) => {
      const k = w.apiKeys.byId(id);
      return !!k && k.status === 1 && (k.expiresAt === null || k.expiresAt > nowSeconds());
    },
    userActive: (id) => w.directory.get(id)?.status === 1,
    keyEnabled: (id) => w.apiKeys.byId(id)?.status === 1,
  });
  return {
    config, billing, prices, quota, usageLogs, gate, health, relay, catalog, inflight, groups, limiter, budgets, budgetsRepo, alerts, alertOutbox, slots,
    close: async () => {
      closed = true;
      if (budgetRetry) clearTimeout(budgetRetry);
      stopForgetting(); inflight.close(); quota.close();
      // Awaited: a probe that outlived the shutdown wrote a channel's status into a database already closed.
      await Promise.all([stopProbing(), health.close()]);
    },
    closeAlerts: async () => { await Promise.all([alerts?.close(), retention.close()]); },
  };
}

/**
 * One minimal request (1 output token) to the channel's first model, with `ref`'s key or else a usable key;
 * success = a 2xx answer. A key no longer among the channel's (replaced by the operator) is not probed, and
 * fails: the secret now under its id is another key, which the verdict would otherwise be pinned on.
 */
async function probeChannel(w: RelayWiring, id: number, ref: KeyRef | undefined, timeoutMs: number, stop?: AbortSignal): Promise<boolean> {
  const ch = w.channels.get(id);
  const model = ch?.models[0];
  const key = ref === undefined ? ch?.keys.find((k) => k.status === 1) : ch?.keys.find((k) => k.id === ref.id && k.fingerprint === ref.fingerprint);
  if (!ch || !model || !key) return false;
  const adapter = w.adapter(ch.type);
  const { body, extraHeaders } = probeRequest(ch, model);
  const u = adapter.buildMessagesRequest(body, { baseUrl: ch.baseUrl, apiKey: key.apiKey, extraHeaders, upstreamModel: ch.modelMapping[model] ?? model }, new Headers());
  const timeout = AbortSignal.timeout(Math.min(timeoutMs, ch.timeoutMs));
  const res = await fetch(u.url, { ...u.init, signal: stop ? AbortSignal.any([timeout, stop]) : timeout });
  // A one-token answer is small: a longer (or endless) one is not read, and the channel is not healthy.
  const read = await readBounded(res.body, { limit: PROBE_BODY_BYTES, deadline: Infinity }).catch(() => null);
  if (!res.ok || !read?.ok) return false;
  try {
    adapter.decodeMessagesResponse(JSON.parse(Buffer.from(read.bytes).toString('utf8')), { requestedModel: model });
    return true;
  } catch {
    return false;
  }
}

const PROBE_BODY_BYTES = 64 * 1024;
