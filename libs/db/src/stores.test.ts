import { describe } from 'bun:test';
import { openDatabase } from './client';
import { storesContract } from './stores.contract';
import { createStores } from './stores';

describe('SQLite stores', () => {
  storesContract({
    async open() {
      const dbh = openDatabase(':memory:');
      return { stores: createStores(dbh), close: async () => dbh.close() };
    },
  });
});
