import { afterAll, beforeAll, describe } from 'bun:test';
import { storesContract } from '../stores.contract';
import { openPgTestDb, requirePg, type PgTestDb } from '../../../../tests/helpers/postgres';
import { createPgStores } from './stores';

const available = await requirePg('libs/db/src/pg/stores.test.ts');
let t: PgTestDb;

// A pool wider than the contract's largest race, so its concurrent calls run on separate connections.
beforeAll(async () => {
  if (available) t = await openPgTestDb('gw_stores', { max: 12 });
});
afterAll(async () => {
  if (available) await t?.close();
});

describe.skipIf(!available)('PostgreSQL stores', () => {
  storesContract({
    async open() {
      await t.reset();
      return { stores: createPgStores(t.handle.db), close: async () => {} };
    },
  });
});
