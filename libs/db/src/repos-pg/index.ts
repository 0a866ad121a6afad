/**
 * PostgreSQL implementations of the repositories in ../repos: one class per SQLite repo, same method
 * names and argument shapes, every method async. Exported from `@gw/db/pg` (the SQLite-only root
 * index does not load them). parity.check.ts keeps the method sets equal.
 */
export { PgApiKeysRepo } from './api-keys';
export { PgAlertOutboxRepo, PgBudgetChargesRepo, PgBudgetsRepo } from './budgets';
export { PgChannelsRepo } from './channels';
export { PgGroupsRepo } from './groups';
export { PgLedgerRepo } from './ledger';
export { PgPricesRepo } from './prices';
export { PgRealtimeSessionsRepo } from './realtime-sessions';
export { PgRedemptionCodesRepo } from './redemption-codes';
export { PgSecurityRepo } from './security';
export { PgSessionsRepo } from './sessions';
export { PgSettlementsRepo } from './settlements';
export { PgTopupOrdersRepo } from './topup-orders';
export { PgUsageLogsRepo, pgLogConditions, pgWithKeyOwner } from './usage-logs';
export { PgUsageStatsRepo, pgLatencyBinSql } from './usage-stats';
export { pgHistoryReads } from './history';
export { PgUsersRepo } from './users';
export { PgWebhookEventsRepo } from './webhook-events';
export { asciiLower, collateC, type PgWriter } from './sql';
