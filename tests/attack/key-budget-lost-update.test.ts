/**
 * Attack: write a key's budget back up while its owner lowers it. `PUT /api/budget/` reads the budget, then writes;
 * if the owner's lower limit lands in between, the thief's write (the limit it read) restores the higher one. Compared
 * with what it read, nothing was raised and the owner heard nothing. The interleaving is forced: the budget store
 * answers the thief's read only after the owner's write has gone through.
 */
import { afterEach, beforeEach, expect, test } from 'bun:test';
import { BudgetsRepo, openDatabase, type BudgetRow, type DbHandle } from '@gw/db';
import { BudgetService, type BudgetBook } from '@gw/billing';
import { ChangeBus } from '@gw/core';

let dbh: DbHandle;
let service: BudgetService;
let between: (() => Promise<unknown>) | null = null;
const owner = { id: 7, role: 1 };

beforeEach(() => {
  dbh = openDatabase(':memory:');
  // The key and its owner exist: the database refuses a budget whose subject does not (migration 0022).
  dbh.sqlite.run("INSERT INTO users (id, username, password_hash, created_at, updated_at) VALUES (7, 'owner', 'x', 1, 1)");
  dbh.sqlite.run("INSERT INTO api_keys (id, user_id, key_hash, prefix, created_at, updated_at) VALUES (3, 7, 'h3', 'sk-', 1, 1)");
  const repo = new BudgetsRepo(dbh.db);
  const late = new Proxy(repo, {
    get(target, prop, recv) {
      if (prop !== 'find') return Reflect.get(target, prop, recv);
      return async (scope: string, subjectId: number, period: string): Promise<BudgetRow | undefined> => {
        const read = target.find(scope, subjectId, period);
        const run = between;
        between = null;
        if (run) await run();
        return read;
      };
    },
  });
  const book = { reload: async () => {}, usage: () => null } as unknown as BudgetBook;
  service = new BudgetService(late as unknown as BudgetsRepo, {} as never, book, {
    user: (id) => (id === owner.id ? owner : undefined), keyOwner: (id) => (id === 3 ? owner.id : undefined), canManage: () => false,
  }, new ChangeBus());
});
afterEach(() => { dbh.close(); between = null; });

test('a key budget the owner lowered in between, written back, is compared with the lowered one', async () => {
  await service.set(owner, { scope: 'key', subject_id: 3, period: 'daily', limit: 1_000 });
  between = () => service.set(owner, { scope: 'key', subject_id: 3, period: 'daily', limit: 10 });
  const r = await service.change(owner, { scope: 'key', subject_id: 3, period: 'daily', limit: 1_000 });
  expect(r.view.limit).toBe(1_000);
  expect(r.replaced).toBe(10);
});
