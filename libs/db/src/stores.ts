import type { ChangeBus } from '@gw/core';
import type { DbHandle } from './client';
import { ApiKeysRepo, type ApiKeysStore } from './repos/api-keys';
import { AlertOutboxRepo, BudgetChargesRepo, BudgetsRepo, type AlertOutboxStore, type BudgetsStore } from './repos/budgets';
import { ChannelsRepo, type ChannelsStore } from './repos/channels';
import { GroupsRepo, type GroupsStore } from './repos/groups';
import { LedgerRepo, type LedgerStore } from './repos/ledger';
import { PricesRepo, type PricesStore } from './repos/prices';
import { RealtimeSessionsRepo, type RealtimeSessionsStore } from './repos/realtime-sessions';
import { RedemptionCodesRepo, type RedemptionCodesStore } from './repos/redemption-codes';
import { SecurityRepo, type SecurityStore } from './repos/security';
import { SessionsRepo, type SessionsStore } from './repos/sessions';
import { SettlementsRepo, type SettlementSink } from './repos/settlements';
import { RealtimeUnfinishedRepo } from './repos/realtime-unfinished';
import { TopupOrdersRepo, type TopupOrdersStore } from './repos/topup-orders';
import { UsageLogsRepo, type UsageLogsStore } from './repos/usage-logs';
import { UsageStatsRepo, type UsageStatsStore } from './repos/usage-stats';
import { UsersRepo, type UsersStore } from './repos/users';
import { WebhookEventsRepo, type WebhookEventsStore } from './repos/webhook-events';

/**
 * Every storage interface the services take. A backend is one implementation of all of them, chosen
 * once in the composition root; services never see which.
 */
export interface Stores {
  users: UsersStore;
  sessions: SessionsStore;
  security: SecurityStore;
  /** Every balance change goes through here (with its ledger row). */
  ledger: LedgerStore;
  apiKeys: ApiKeysStore;
  channels: ChannelsStore;
  groups: GroupsStore;
  prices: PricesStore;
  usageLogs: UsageLogsStore;
  usageStats: UsageStatsStore;
  topupOrders: TopupOrdersStore;
  webhookEvents: WebhookEventsStore;
  redemptionCodes: RedemptionCodesStore;
  realtimeSessions: RealtimeSessionsStore;
  /** Budgets and low-balance thresholds (management, and the budget book's reloads). */
  budgets: BudgetsStore;
  /** Alerts written by charges, as the delivery worker and the management API see them. */
  alertOutbox: AlertOutboxStore;
}

/** The SQLite stores, plus the synchronous settlement port only the in-process QuotaService uses. */
export interface SqliteStores extends Stores {
  settlements: SettlementSink;
  /** Realtime responses running, as billed should the process die (QuotaService bills them at the next start). */
  realtimeUnfinished: RealtimeUnfinishedRepo;
  /**
   * Budgets are charged inside the synchronous settlement batch (BudgetChargesRepo joins its transaction),
   * so on SQLite they stay synchronous like SettlementSink; PostgreSQL mode settles budgets by group commit.
   */
  budgets: BudgetsRepo;
  budgetCharges: BudgetChargesRepo;
  alertOutbox: AlertOutboxRepo;
}

/** Builds every SQLite store on one open database. `bus` receives the ledger's `balance.changed`. */
export function createStores(dbh: Pick<DbHandle, 'db' | 'sqlite'>, bus?: ChangeBus): SqliteStores {
  const { db } = dbh;
  return {
    users: new UsersRepo(db),
    sessions: new SessionsRepo(db),
    security: new SecurityRepo(db),
    ledger: new LedgerRepo(db, bus),
    apiKeys: new ApiKeysRepo(db),
    channels: new ChannelsRepo(db),
    groups: new GroupsRepo(db),
    prices: new PricesRepo(db),
    usageLogs: new UsageLogsRepo(db),
    usageStats: new UsageStatsRepo(db),
    topupOrders: new TopupOrdersRepo(db),
    webhookEvents: new WebhookEventsRepo(db),
    redemptionCodes: new RedemptionCodesRepo(db),
    realtimeSessions: new RealtimeSessionsRepo(db),
    settlements: new SettlementsRepo(dbh.sqlite),
    realtimeUnfinished: new RealtimeUnfinishedRepo(dbh.sqlite),
    budgets: new BudgetsRepo(db),
    budgetCharges: new BudgetChargesRepo(dbh.sqlite),
    alertOutbox: new AlertOutboxRepo(db),
  };
}
