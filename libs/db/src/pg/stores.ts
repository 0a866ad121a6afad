import type { ChangeBus } from '@gw/core';
import type { Stores } from '../stores';
import {
  PgAlertOutboxRepo, PgApiKeysRepo, PgBudgetsRepo, PgChannelsRepo, PgGroupsRepo, PgLedgerRepo, PgPricesRepo, PgRealtimeSessionsRepo, PgRedemptionCodesRepo,
  PgSecurityRepo, PgSessionsRepo, PgTopupOrdersRepo, PgUsageLogsRepo, PgUsageStatsRepo, PgUsersRepo, PgWebhookEventsRepo,
} from '../repos-pg';
import type { PgDb } from './client';

/**
 * Builds every storage interface on one PostgreSQL pool: the PostgreSQL twin of `createStores`.
 * `bus` receives the ledger's `balance.changed` (after commit). Settlement and budget charging are not
 * here: in PostgreSQL mode they are the group-commit path's (PgGroupCommitter), not a synchronous port.
 */
export function createPgStores(db: PgDb, bus?: ChangeBus): Stores {
  return {
    users: new PgUsersRepo(db),
    sessions: new PgSessionsRepo(db),
    security: new PgSecurityRepo(db),
    ledger: new PgLedgerRepo(db, bus),
    apiKeys: new PgApiKeysRepo(db),
    channels: new PgChannelsRepo(db),
    groups: new PgGroupsRepo(db),
    prices: new PgPricesRepo(db),
    usageLogs: new PgUsageLogsRepo(db),
    usageStats: new PgUsageStatsRepo(db),
    topupOrders: new PgTopupOrdersRepo(db),
    webhookEvents: new PgWebhookEventsRepo(db),
    redemptionCodes: new PgRedemptionCodesRepo(db),
    realtimeSessions: new PgRealtimeSessionsRepo(db),
    budgets: new PgBudgetsRepo(db),
    alertOutbox: new PgAlertOutboxRepo(db),
  };
}
