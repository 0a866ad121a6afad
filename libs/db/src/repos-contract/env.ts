import type { ApiKeysRepo } from '../repos/api-keys';
import type { AlertOutboxRepo, BudgetChargesRepo, BudgetsRepo } from '../repos/budgets';
import type { ChannelsRepo } from '../repos/channels';
import type { GroupsRepo } from '../repos/groups';
import type { LedgerRepo } from '../repos/ledger';
import type { PricesRepo } from '../repos/prices';
import type { RealtimeSessionsRepo } from '../repos/realtime-sessions';
import type { RedemptionCodesRepo } from '../repos/redemption-codes';
import type { SecurityRepo } from '../repos/security';
import type { SessionsRepo } from '../repos/sessions';
import type { SettlementsRepo } from '../repos/settlements';
import type { TopupOrdersRepo } from '../repos/topup-orders';
import type { UsageLogsRepo } from '../repos/usage-logs';
import type { UsageStatsRepo } from '../repos/usage-stats';
import type { UsersRepo } from '../repos/users';
import type { WebhookEventsRepo } from '../repos/webhook-events';

/**
 * A repository as the contract calls it: every method may answer now or later (the suite awaits
 * each call, so today's synchronous SQLite classes and the async PostgreSQL ones both fit).
 */
export type Awaitable<T> = {
  [K in keyof T]: T[K] extends (...args: infer A) => infer R ? (...args: A) => R | Promise<Awaited<R>> : T[K];
};

/** The repositories under contract, keyed like a store set. */
export interface ContractRepos {
  apiKeys: Awaitable<ApiKeysRepo>;
  budgets: Awaitable<BudgetsRepo>;
  budgetCharges: Awaitable<BudgetChargesRepo>;
  alertOutbox: Awaitable<AlertOutboxRepo>;
  channels: Awaitable<ChannelsRepo>;
  groups: Awaitable<GroupsRepo>;
  ledger: Awaitable<LedgerRepo>;
  prices: Awaitable<PricesRepo>;
  realtimeSessions: Awaitable<RealtimeSessionsRepo>;
  redemptionCodes: Awaitable<RedemptionCodesRepo>;
  security: Awaitable<SecurityRepo>;
  sessions: Awaitable<SessionsRepo>;
  settlements: Awaitable<SettlementsRepo>;
  topupOrders: Awaitable<TopupOrdersRepo>;
  usageLogs: Awaitable<UsageLogsRepo>;
  usageStats: Awaitable<UsageStatsRepo>;
  users: Awaitable<UsersRepo>;
  webhookEvents: Awaitable<WebhookEventsRepo>;
}

/** One empty database with every repository over it. */
export interface ContractEnv {
  repos: ContractRepos;
  /** What the repositories emitted on their ChangeBus, in order. */
  events: Array<{ event: string; payload: unknown }>;
  close(): Promise<void>;
}

/** Called before every test: an empty database (fresh, or truncated). */
export type MakeEnv = () => Promise<ContractEnv>;
