/**
 * Budgets follow their subject (SQLite 0022, PostgreSQL 0025): the upgrade removes the budgets and low-balance
 * thresholds of keys and users deleted before it; afterwards a deleted key (its own DELETE or its user's cascade)
 * or user takes its own with it, and none is written for a subject that is gone (a set racing the deletion).
 * What the routes show of it: tests/attack/budget-orphans.test.ts.
 */
import { describe, expect, test } from 'bun:test';
import { requirePg } from '../../../tests/helpers/postgres';
import { pgSchemaOfFile, withSqliteFile } from '../../../tests/helpers/migration-dbs';

/** The migration's statements, run again on a database where its triggers were dropped to write the state before it. */
const migration = async (file: string) => (await Bun.file(new URL(`../../../drizzle/${file}`, import.meta.url)).text()).split('--> statement-breakpoint');
const TRIGGERS = { sqlite: ['api_keys_drop_budgets', 'users_drop_budgets', 'budgets_need_subject', 'low_balance_alerts_need_user'],
  pg: [['gw_api_keys_drop_budgets', 'api_keys'], ['gw_users_drop_budgets', 'users'], ['gw_budgets_need_subject', 'budgets'], ['gw_low_balance_alerts_need_user', 'low_balance_alerts']] };
const pg = await requirePg('libs/db/src/budget-subjects.test.ts');
const pgDb = pgSchemaOfFile('gw_budsub', pg);
// Users 1 and 2 with keys 10 and 11 exist; user 3 and key 12 were deleted before the upgrade (their budgets remain).
const setup = ['INSERT INTO users (id, username, password_hash, created_at, updated_at) VALUES (1, \'a\', \'x\', 1, 1), (2, \'b\', \'x\', 1, 1)',
  'INSERT INTO api_keys (id, user_id, key_hash, prefix, created_at, updated_at) VALUES (10, 1, \'h10\', \'sk-\', 1, 1), (11, 2, \'h11\', \'sk-\', 1, 1)',
  `INSERT INTO budgets (id, scope, subject_id, period, limit_amount, created_at, updated_at) VALUES ${[
    [1, 'user', 1], [2, 'user', 2], [3, 'user', 3], [4, 'key', 10], [5, 'key', 11], [6, 'key', 12]].map(([id, s, sub]) => `(${id}, '${s}', ${sub}, 'daily', 5, 1, 1)`).join(', ')}`,
  'INSERT INTO low_balance_alerts (user_id, threshold, created_at, updated_at) VALUES (1, 5, 1, 1), (2, 5, 1, 1), (3, 5, 1, 1)'];
/** One database as the scenario sees it: run a statement (rejecting when refused), read one numeric column. */
interface Db { run(statement: string): Promise<unknown>; ids(query: string): Promise<number[]> }

/** Upgrade (triggers dropped, the old state written, the migration run again), then deletes and late writes. */
async function scenario(db: Db, dropTriggers: string[], file: string, deleteUser2: () => Promise<unknown>): Promise<void> {
  const state = async () => [await db.ids('SELECT id FROM budgets ORDER BY id'), await db.ids('SELECT user_id AS id FROM low_balance_alerts ORDER BY user_id')];
  for (const s of [...dropTriggers, ...setup, ...await migration(file)]) await db.run(s);
  expect(await state()).toEqual([[1, 2, 4, 5], [1, 2]]);
  await db.run('DELETE FROM api_keys WHERE id = 10');
  expect(await state()).toEqual([[1, 2, 5], [1, 2]]);
  await deleteUser2();
  expect(await state()).toEqual([[1], [1]]);
  // Written after the subject went (a set that checked it before the delete): refused, nothing left behind.
  for (const late of ["INSERT INTO budgets (scope, subject_id, period, limit_amount, created_at, updated_at) VALUES ('key', 11, 'daily', 5, 1, 1)",
    "INSERT INTO budgets (scope, subject_id, period, limit_amount, created_at, updated_at) VALUES ('user', 2, 'daily', 5, 1, 1)",
    'INSERT INTO low_balance_alerts (user_id, threshold, created_at, updated_at) VALUES (2, 5, 1, 1)']) {
    expect(await db.run(late).then(() => '', (e: Error) => e.message)).toContain('budget_subject_gone');
  }
  expect(await state()).toEqual([[1], [1]]);
}

describe('budgets follow their subject', () => {
  test('SQLite', () => withSqliteFile(async (h) => {
    const db: Db = { run: async (s) => h.sqlite.exec(s), ids: async (q) => (h.sqlite.query(q).all() as Array<{ id: number }>).map((r) => Number(r.id)) };
    await scenario(db, TRIGGERS.sqlite.map((t) => `DROP TRIGGER ${t}`), '0022_budgets_follow_subjects.sql', () => db.run('DELETE FROM users WHERE id = 2'));
  }));

  test.skipIf(!pg)('PostgreSQL', async () => {
    const { sql } = await pgDb.open();
    const db: Db = { run: (s) => sql.unsafe(s), ids: async (q) => (await sql.unsafe(q)).map((r) => Number(r.id)) };
    // Deleted from a session whose search_path does not name the gateway's schema: the triggers still delete there.
    await scenario(db, TRIGGERS.pg.map(([t, table]) => `DROP TRIGGER ${t} ON ${table}`), 'pg/0025_budgets_follow_subjects.sql', () => sql.begin(async (tx) => {
      await tx.unsafe('SET LOCAL search_path = public');
      await tx.unsafe(`DELETE FROM "${pgDb.schema}".users WHERE id = 2`);
    }));
  });
});
