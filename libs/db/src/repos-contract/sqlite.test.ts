import { describe } from 'bun:test';
import { ChangeBus } from '@gw/core';
import { openDatabase } from '../client';
import {
  AlertOutboxRepo, BudgetChargesRepo, BudgetsRepo, ApiKeysRepo, ChannelsRepo, GroupsRepo, LedgerRepo, PricesRepo, RealtimeSessionsRepo, RedemptionCodesRepo, SecurityRepo,
  SessionsRepo, SettlementsRepo, TopupOrdersRepo, UsageLogsRepo, UsageStatsRepo, UsersRepo, WebhookEventsRepo,
} from '../index';
import { repoContract, type ContractEnv } from './index';

/** Today's synchronous SQLite repositories, each test on a fresh in-memory database. */
describe('repository contract: SQLite', () => {
  repoContract(async (): Promise<ContractEnv> => {
    const h = openDatabase(':memory:');
    const bus = new ChangeBus();
    const events: ContractEnv['events'] = [];
    bus.on('balance.changed', (payload) => { events.push({ event: 'balance.changed', payload }); });
    const db = h.db;
    return {
      events,
      repos: {
        apiKeys: new ApiKeysRepo(db), channels: new ChannelsRepo(db), groups: new GroupsRepo(db), ledger: new LedgerRepo(db, bus),
        prices: new PricesRepo(db), realtimeSessions: new RealtimeSessionsRepo(db), redemptionCodes: new RedemptionCodesRepo(db),
        security: new SecurityRepo(db), sessions: new SessionsRepo(db), settlements: new SettlementsRepo(h.sqlite),
        topupOrders: new TopupOrdersRepo(db), usageLogs: new UsageLogsRepo(db), usageStats: new UsageStatsRepo(db),
        users: new UsersRepo(db), webhookEvents: new WebhookEventsRepo(db),
        budgets: new BudgetsRepo(db), budgetCharges: new BudgetChargesRepo(h.sqlite), alertOutbox: new AlertOutboxRepo(db),
      },
      close: async () => h.close(),
    };
  });
});
