import { afterAll, beforeAll, describe } from 'bun:test';
import { ChangeBus } from '@gw/core';
import { repoContract, type ContractEnv, type ContractRepos } from '../repos-contract';
import {
  PgApiKeysRepo, PgChannelsRepo, PgGroupsRepo, PgLedgerRepo, PgPricesRepo, PgRealtimeSessionsRepo, PgRedemptionCodesRepo,
  PgSecurityRepo, PgSessionsRepo, PgSettlementsRepo, PgTopupOrdersRepo, PgUsageLogsRepo, PgUsageStatsRepo, PgUsersRepo,
  PgWebhookEventsRepo,
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
  bus.on('balance.changed', (payload) => events.push({ event: 'balance.changed', payload }));
  return {
    events,
    repos: asContract({
      apiKeys: new PgApiKeysRepo(db), channels: new PgChannelsRepo(db), groups: new PgGroupsRepo(db), ledger: new PgLedgerRepo(db, bus),
      prices: new PgPricesRepo(db), realtimeSessions: new PgRealtimeSessionsRepo(db), redemptionCodes: new PgRedemptionCodesRepo(db),
      security: new PgSecurityRepo(db), sessions: new PgSessionsRepo(db), settlements: new PgSettlementsRepo(db),
      topupOrders: new PgTopupOrdersRepo(db), usageLogs: new PgUsageLogsRepo(db), usageStats: new PgUsageStatsRepo(db),
      users: new PgUsersRepo(db), webhookEvents: new PgWebhookEventsRepo(db),
    }),
    close: async () => {},
  };
}

describe.skipIf(!available)('repository contract: PostgreSQL', () => {
  repoContract(emptyEnv);
});
