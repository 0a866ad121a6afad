/**
 * Budgets follow their subject (SQLite 0022, PostgreSQL 0025): the upgrade removes the budgets and low-balance
 * thresholds of keys and users deleted before it; afterwards a deleted key (its own DELETE or its user's cascade)
 * or user takes its own with it, and none is written for a subject that is gone (a set racing the deletion).
 * What the routes show of it: tests/attack/budget-orphans.test.ts.
 */
import { afterAll, describe, expect, test } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase } from './client';
import { openPostgres, type PgHandle } from './pg/client';
import { dropSchema, freshSchema, PG_TEST_URL, requirePg } from '../../../tests/helpers/postgres';

/** The migration's statements, run again on a database where its triggers were dropped to write the state before it. */
const migration = async (file: string) => (await Bun.file(new URL(`../../../drizzle/${file}`, import.meta.url)).text()).split('--> statement-breakpoint');
const TRIGGERS = { sqlite: ['api_keys_drop_budgets', 'users_drop_budgets', 'budgets_need_subject', 'low_balance_alerts_need_user'],
  pg: [['gw_api_keys_drop_budgets', 'api_keys'], ['gw_users_drop_budgets', 'users'], ['gw_budgets_need_subject', 'budgets'], ['gw_low_balance_alerts_need_user', 'low_balance_alerts']] };
const pg = await requirePg('libs/db/src/budget-subjects.test.ts');
const schema = freshSchema('gw_budsub');
// Users 1 and 2 with keys 10 and 11 exist; user 3 and key 12 were deleted before the upgrade (their budgets remain).
const setup = ['INSERT INTO users (id, username, password_hash, created_at, updated_at) VALUES (1, \'a\', \'x\', 1, 1), (2, \'b\', \'x\', 1, 1)',
  'INSERT INTO api_keys (id, user_id, key_hash, prefix, created_at, updated_at) VALUES (10, 1, \'h10\', \'sk-\', 1, 1), (11, 2, \'h11\', \'sk-\', 1, 1)',
  `INSERT INTO budgets (id, scope, subject_id, period, limit_amount, created_at, updated_at) VALUES ${[
    [1, 'user', 1], [2, 'user', 2], [3, 'user', 3], [4, 'key', 10], [5, 'key', 11], [6, 'key', 12]].map(([id, s, sub]) => `(${id}, '${s}', ${sub}, 'daily', 5, 1, 1)`).join(', ')}`,
  'INSERT INTO low_balance_alerts (user_id, threshold, created_at, updated_at) VALUES (1, 5, 1, 1), (2, 5, 1, 1), (3, 5, 1, 1)'];
const ids = (rows: any[], col: string) => rows.map((r) => Number(r[col]));

describe('budgets follow their subject', () => {
  test('SQLite', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-bs-'));
    const h = openDatabase(join(dir, 'db.sqlite'), { checkpointMs: 0 });
    const budgets = () => ids(h.sqlite.query('SELECT id FROM budgets ORDER BY id').all(), 'id');
    const low = () => ids(h.sqlite.query('SELECT user_id FROM low_balance_alerts ORDER BY user_id').all(), 'user_id');
    try {
      for (const t of TRIGGERS.sqlite) h.sqlite.run(`DROP TRIGGER ${t}`);
      for (const s of setup) h.sqlite.run(s);
      for (const s of await migration('0022_budgets_follow_subjects.sql')) h.sqlite.exec(s);
      expect([budgets(), low()]).toEqual([[1, 2, 4, 5], [1, 2]]);
      h.sqlite.run('DELETE FROM api_keys WHERE id = 10');
      expect([budgets(), low()]).toEqual([[1, 2, 5], [1, 2]]);
      h.sqlite.run('DELETE FROM users WHERE id = 2');
      expect([budgets(), low()]).toEqual([[1], [1]]);
      // Written after the subject went (a set that checked it before the delete): refused, nothing left behind.
      expect(() => h.sqlite.run("INSERT INTO budgets (scope, subject_id, period, limit_amount, created_at, updated_at) VALUES ('key', 11, 'daily', 5, 1, 1)")).toThrow('budget_subject_gone');
      expect(() => h.sqlite.run("INSERT INTO budgets (scope, subject_id, period, limit_amount, created_at, updated_at) VALUES ('user', 2, 'daily', 5, 1, 1)")).toThrow('budget_subject_gone');
      expect(() => h.sqlite.run('INSERT INTO low_balance_alerts (user_id, threshold, created_at, updated_at) VALUES (2, 5, 1, 1)')).toThrow('budget_subject_gone');
      expect([budgets(), low()]).toEqual([[1], [1]]);
    } finally {
      h.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  let handle: PgHandle | undefined;
  afterAll(async () => {
    await handle?.close();
    if (pg) await dropSchema(schema);
  });
  test.skipIf(!pg)('PostgreSQL', async () => {
    handle = await openPostgres(PG_TEST_URL, { schema, max: 1 });
    const { sql } = handle;
    const budgets = async () => ids(await sql`SELECT id FROM budgets ORDER BY id`, 'id');
    const low = async () => ids(await sql`SELECT user_id FROM low_balance_alerts ORDER BY user_id`, 'user_id');
    for (const [t, table] of TRIGGERS.pg) await sql.unsafe(`DROP TRIGGER ${t} ON ${table}`);
    for (const s of setup) await sql.unsafe(s);
    for (const s of await migration('pg/0025_budgets_follow_subjects.sql')) await sql.unsafe(s);
    expect([await budgets(), await low()]).toEqual([[1, 2, 4, 5], [1, 2]]);
    await sql`DELETE FROM api_keys WHERE id = 10`;
    expect([await budgets(), await low()]).toEqual([[1, 2, 5], [1, 2]]);
    // Deleted from a session whose search_path does not name the gateway's schema: the triggers still delete there.
    await sql.begin(async (tx) => {
      await tx.unsafe('SET LOCAL search_path = public');
      await tx.unsafe(`DELETE FROM "${schema}".users WHERE id = 2`);
    });
    expect([await budgets(), await low()]).toEqual([[1], [1]]);
    // Written after the subject went (a set that checked it before the delete): refused, nothing left behind.
    await expect(sql`INSERT INTO budgets (scope, subject_id, period, limit_amount, created_at, updated_at) VALUES ('key', 11, 'daily', 5, 1, 1)`).rejects.toThrow('budget_subject_gone');
    await expect(sql`INSERT INTO budgets (scope, subject_id, period, limit_amount, created_at, updated_at) VALUES ('user', 2, 'daily', 5, 1, 1)`).rejects.toThrow('budget_subject_gone');
    await expect(sql`INSERT INTO low_balance_alerts (user_id, threshold, created_at, updated_at) VALUES (2, 5, 1, 1)`).rejects.toThrow('budget_subject_gone');
    expect([await budgets(), await low()]).toEqual([[1], [1]]);
  });
});
