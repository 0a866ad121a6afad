import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { ChangeBus } from '@gw/core';
import { attemptWindowsContract, repoContract, type ContractEnv, type ContractRepos } from '../repos-contract';
import { PG_SWEEP, pgAttemptWindows, pgSweepAttemptWindows } from '../pg/attempt-windows';
import {
  PgAlertOutboxRepo, PgBudgetChargesRepo, PgBudgetsRepo, PgApiKeysRepo, PgChannelsRepo, PgGroupsRepo, PgLedgerRepo, PgPricesRepo, PgRealtimeSessionsRepo, PgRedemptionCodesRepo,
  PgSecurityRepo, PgSessionsRepo, PgSettlementsRepo, PgTopupOrdersRepo, PgUsageLogsRepo, PgUsageStatsRepo, PgUsersRepo,
  PgWebhookEventsRepo, pgHistoryReads,
} from './index';
import { openPgTestDb, requirePg, type PgTestDb } from '../../../../tests/helpers/postgres';

const available = await requirePg('libs/db/src/repos-pg/contract.test.ts');
let t: PgTestDb;

beforeAll(async () => {
  if (available) t = await openPgTestDb('gw_repos');
});
afterAll(async () => {
  if (available) await t?.close();
});

/**
 * The PostgreSQL classes as the contract types them. The cast only widens the transaction argument
 * (PgWriter vs the SQLite DbWriter, which the suite never passes); parity.check.ts proves the method
 * names, the awaited results and every other argument equal at compile time.
 */
function asContract(repos: Record<keyof ContractRepos, object>): ContractRepos {
  return repos as ContractRepos;
}

/** Every test starts from empty tables on the file's own schema. */
async function emptyEnv(): Promise<ContractEnv> {
  await t.reset();
  const db = t.handle.db;
  const bus = new ChangeBus();
  const events: ContractEnv['events'] = [];
  bus.on('balance.changed', (payload) => { events.push({ event: 'balance.changed', payload }); });
  return {
    events,
    repos: asContract({
      apiKeys: new PgApiKeysRepo(db), channels: new PgChannelsRepo(db), groups: new PgGroupsRepo(db), ledger: new PgLedgerRepo(db, bus),
      prices: new PgPricesRepo(db), realtimeSessions: new PgRealtimeSessionsRepo(db), redemptionCodes: new PgRedemptionCodesRepo(db),
      security: new PgSecurityRepo(db), sessions: new PgSessionsRepo(db), settlements: new PgSettlementsRepo(db),
      topupOrders: new PgTopupOrdersRepo(db), usageLogs: new PgUsageLogsRepo(db), usageStats: new PgUsageStatsRepo(db),
      users: new PgUsersRepo(db), webhookEvents: new PgWebhookEventsRepo(db),
      budgets: new PgBudgetsRepo(db), budgetCharges: new PgBudgetChargesRepo(db), alertOutbox: new PgAlertOutboxRepo(db),
    }),
    close: async () => {},
  };
}

describe.skipIf(!available)('repository contract: PostgreSQL', () => {
  repoContract(emptyEnv);
});

describe.skipIf(!available)('attempt windows contract: PostgreSQL', () => {
  attemptWindowsContract(async () => {
    await t.reset();
    const { sql } = t.handle;
    return {
      windows: (opts) => pgAttemptWindows(sql, opts),
      sweep: (now) => pgSweepAttemptWindows(sql, now),
      keys: async () => (await sql<{ key: string }[]>`select key from attempt_windows order by key collate "C"`).map((r) => r.key),
      fill: async (n, prefix, start, windowMs) => {
        await sql`insert into attempt_windows (key, window_ms, start, cur, prev)
          select ${prefix} || i, ${windowMs}, ${start}, 1, 0 from generate_series(0, ${n - 1}) i`;
      },
      // A small table's cheapest plan is often to read it all: with sequential scans priced out, a plan that still
      // reads the whole table has no index to use.
      sweepPlan: (now) => sql.begin(async (tx) => {
        await tx`set local enable_seqscan = off`;
        const rows = await tx.unsafe(`explain ${PG_SWEEP}`, [now]);
        return rows.map((r) => String(r['QUERY PLAN'])).join('\n');
      }),
      close: async () => {},
    };
  });
});

describe.skipIf(!available)('pgHistoryReads', () => {
  test('reads both result sets of a statistics query from the repository', async () => {
    const { repos } = await emptyEnv();
    const u = await repos.users.insert({ username: 'sr', passwordHash: 'h', createdAt: 1, updatedAt: 1 });
    for (const [i, ms] of [3, 3, 900].entries()) {
      await repos.usageLogs.insertOnce({ requestId: `sr-${i}`, userId: u.id, apiKeyId: 1, model: 'm', status: 200, latencyMs: ms, cost: 2, createdAt: 100 });
    }
    const reader = pgHistoryReads(t.handle.db, 10_000).stats;
    const res = await reader.read({ from: 0, to: 1_000, bucketSeconds: 3600, offsetSeconds: 0, groupBy: 'none', maxRows: 10 });
    expect(res.rows).toEqual([{ bucket: 0, grp: null, requests: 3, errors: 0, inputTokens: 0n, outputTokens: 0n, cacheReadTokens: 0n, cacheWriteTokens: 0n, audioTokens: 0n, cost: 6n }]);
    expect(res.hist.map((h) => [h.bin, h.n]).sort((a, b) => a[0]! - b[0]!)).toEqual([[13, 2], [79, 1]]);
    await reader.close();
  });
});
