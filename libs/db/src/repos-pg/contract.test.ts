import { afterAll, beforeAll, describe } from 'bun:test';
import { ChangeBus } from '@gw/core';
import { openPostgres, type PgHandle } from '../pg/client';
import { repoContract, type ContractEnv, type ContractRepos } from '../repos-contract';
import {
  PgApiKeysRepo, PgChannelsRepo, PgGroupsRepo, PgLedgerRepo, PgPricesRepo, PgRealtimeSessionsRepo, PgRedemptionCodesRepo,
  PgSecurityRepo, PgSessionsRepo, PgSettlementsRepo, PgTopupOrdersRepo, PgUsageLogsRepo, PgUsageStatsRepo, PgUsersRepo,
  PgWebhookEventsRepo,
} from './index';
import { PG_TEST_URL, dropSchema, freshSchema, requirePg } from '../../../../tests/helpers/postgres';

const available = await requirePg('libs/db/src/repos-pg/contract.test.ts');
const schema = freshSchema('gw_repos');
let h: PgHandle;

beforeAll(async () => {
  if (available) h = await openPostgres(PG_TEST_URL, { schema, max: 4 });
});
afterAll(async () => {
  if (!available) return;
  await h?.close();
  await dropSchema(schema);
});

/**
 * The PostgreSQL classes as the contract types them. The cast only widens the transaction argument
 * (PgWriter vs the SQLite DbWriter, which the suite never passes); parity.check.ts proves the method
 * names, the awaited results and every other argument equal at compile time.
 */
function asContract(repos: Record<keyof ContractRepos, object>): ContractRepos {
  return repos as ContractRepos;
}

let wipe: string | null = null;

/**
 * One schema per file; every test starts from empty tables with identities restarted (ids from 1,
 * as in a new SQLite file). DELETE rather than TRUNCATE: on these tiny tables it costs ~15 ms where
 * TRUNCATE (new files per table) took 100-600 ms on a loaded machine.
 */
async function emptyEnv(): Promise<ContractEnv> {
  if (!wipe) {
    const tables = await h.sql<{ t: string }[]>`select tablename as t from pg_tables where schemaname = ${schema} and tablename <> '__drizzle_migrations'`;
    const seqs = await h.sql<{ s: string }[]>`select sequencename as s from pg_sequences where schemaname = ${schema} and sequencename not like '%drizzle%'`;
    wipe = [...tables.map((x) => `delete from "${x.t}";`), ...seqs.map((x) => `alter sequence "${x.s}" restart;`)].join('\n');
  }
  await h.sql.unsafe(wipe);
  const bus = new ChangeBus();
  const events: ContractEnv['events'] = [];
  bus.on('balance.changed', (payload) => events.push({ event: 'balance.changed', payload }));
  const db = h.db;
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
