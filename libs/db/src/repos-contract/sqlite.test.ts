import { describe } from 'bun:test';
import { ChangeBus } from '@gw/core';
import { openDatabase } from '../client';
import {
  AlertOutboxRepo, BudgetChargesRepo, BudgetsRepo, ApiKeysRepo, ChannelsRepo, GroupsRepo, LedgerRepo, PricesRepo, RealtimeSessionsRepo, RedemptionCodesRepo, SecurityRepo,
  SessionsRepo, SettlementsRepo, TopupOrdersRepo, UsageLogsRepo, UsageStatsRepo, UsersRepo, WebhookEventsRepo,
} from '../index';
import { SQLITE_SWEEP, sqliteAttemptWindows, sqliteSweepAttemptWindows } from '../repos/attempt-windows';
import { attemptWindowsContract, repoContract, type ContractEnv } from './index';

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

describe('attempt windows contract: SQLite', () => {
  attemptWindowsContract(async () => {
    const h = openDatabase(':memory:');
    const { sqlite } = h;
    return {
      windows: (opts) => sqliteAttemptWindows(sqlite, opts),
      sweep: async (now) => sqliteSweepAttemptWindows(sqlite, now),
      keys: async () => sqlite.query<{ key: string }, []>('SELECT key FROM attempt_windows ORDER BY key').all().map((r) => r.key),
      fill: async (n, prefix, start, windowMs) => {
        sqlite.query(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?1 - 1)
          INSERT INTO attempt_windows (key, window_ms, start, cur, prev) SELECT ?2 || i, ?3, ?4, 1, 0 FROM n`).run(n, prefix, windowMs, start);
      },
      sweepPlan: async (now) => sqlite.query<{ detail: string }, [number]>(`EXPLAIN QUERY PLAN ${SQLITE_SWEEP}`)
        .all(now).map((r) => r.detail).join('\n'),
      close: async () => h.close(),
    };
  });
});
