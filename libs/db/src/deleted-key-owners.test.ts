/**
 * deleted_api_keys (SQLite 0020, PostgreSQL 0022): the trigger records the owner of every key deleted, by its own
 * DELETE or its user's cascade; the upgrade's statement fills in keys deleted before it from their usage rows.
 */
import { describe, expect, test } from 'bun:test';
import { requirePg } from '../../../tests/helpers/postgres';
import { pgSchemaOfFile, withSqliteFile } from '../../../tests/helpers/migration-dbs';

/** The migration's last statement: the fill from usage rows. */
const backfill = async (file: string) => (await Bun.file(new URL(`../../../drizzle/${file}`, import.meta.url)).text()).split('--> statement-breakpoint').at(-1)!;
const pg = await requirePg('libs/db/src/deleted-key-owners.test.ts');
const pgDb = pgSchemaOfFile('gw_delkeys', pg);
const { schema } = pgDb;
// Keys 10 (user 1) and 11 (user 2) exist; key 12 of user 2 was deleted before the upgrade (only its rows remain).
const ROWS = [[1, 10], [1, 10], [2, 11], [2, 12], [2, 12]] as const;
const setup = ['INSERT INTO users (id, username, password_hash, created_at, updated_at) VALUES (1, \'a\', \'x\', 1, 1), (2, \'b\', \'x\', 1, 1)',
  'INSERT INTO api_keys (id, user_id, key_hash, prefix, created_at, updated_at) VALUES (10, 1, \'h10\', \'sk-\', 1, 1), (11, 2, \'h11\', \'sk-\', 1, 1)',
  `INSERT INTO usage_logs (request_id, user_id, api_key_id, model, status, created_at) VALUES ${ROWS.map(([u, k], i) => `('r${i}', ${u}, ${k}, 'm', 200, 1)`).join(', ')}`];
const owners = (rows: any[]) => rows.map((r) => ({ id: Number(r.id), user: Number(r.user_id) }));

describe('deleted keys keep their owner', () => {
  test('SQLite', () => withSqliteFile(async (h) => {
    const all = () => owners(h.sqlite.query('SELECT id, user_id FROM deleted_api_keys ORDER BY id').all());
    for (const s of setup) h.sqlite.run(s);
    h.sqlite.exec(await backfill('0020_deleted_key_owners.sql'));
    expect(all()).toEqual([{ id: 12, user: 2 }]);
    h.sqlite.run('DELETE FROM api_keys WHERE id = 10');
    h.sqlite.run('DELETE FROM users WHERE id = 2');
    expect(all()).toEqual([{ id: 10, user: 1 }, { id: 11, user: 2 }, { id: 12, user: 2 }]);
  }));

  test.skipIf(!pg)('PostgreSQL', async () => {
    const { sql } = await pgDb.open();
    const all = async () => owners(await sql`SELECT id, user_id FROM deleted_api_keys ORDER BY id`);
    for (const s of setup) await sql.unsafe(s);
    await sql.unsafe(await backfill('pg/0022_deleted_key_owners.sql'));
    expect(await all()).toEqual([{ id: 12, user: 2 }]);
    await sql`DELETE FROM api_keys WHERE id = 10`;
    // Deleted from a session whose search_path does not name the gateway's schema: the trigger still writes there.
    await sql.begin(async (tx) => {
      await tx.unsafe('SET LOCAL search_path = public');
      await tx.unsafe(`DELETE FROM "${schema}".users WHERE id = 2`);
    });
    expect(await all()).toEqual([{ id: 10, user: 1 }, { id: 11, user: 2 }, { id: 12, user: 2 }]);
  });
});
