/**
 * The migration that makes keys in their owner's group follow the owner (SQLite 0011, PostgreSQL 0014): its
 * statement, run over rows of every kind, clears exactly the keys whose group equals their owner's.
 */
import { describe, expect, test } from 'bun:test';
import { requirePg } from '../../../tests/helpers/postgres';
import { pgSchemaOfFile, withSqliteFile } from '../../../tests/helpers/migration-dbs';

const statement = (file: string) => Bun.file(new URL(`../../../drizzle/${file}`, import.meta.url)).text();
// user 1 in team, user 2 in default; keys: same group, another group, none, and user 2's key in team.
const USERS = [[1, 'a', 'team'], [2, 'b', 'default']] as const;
const KEYS = [[10, 1, 'team'], [11, 1, 'gold'], [12, 1, null], [13, 2, 'team']] as const;
const pg = await requirePg('libs/db/src/key-group-migration.test.ts');
const pgDb = pgSchemaOfFile('gw_keygroup', pg);
const EXPECTED = [{ id: 10, group: null }, { id: 11, group: 'gold' }, { id: 12, group: null }, { id: 13, group: 'team' }];

describe('keys in their owner\'s group follow the owner (migration)', () => {
  test('SQLite', () => withSqliteFile(async (h) => {
    for (const [id, name, group] of USERS) h.sqlite.run('INSERT INTO users (id, username, password_hash, "group", created_at, updated_at) VALUES (?, ?, ?, ?, 1, 1)', [id, name, 'x', group]);
    for (const [id, user, group] of KEYS) h.sqlite.run('INSERT INTO api_keys (id, user_id, key_hash, prefix, "group", created_at, updated_at) VALUES (?, ?, ?, ?, ?, 1, 1)', [id, user, `h${id}`, 'sk-', group]);
    h.sqlite.exec(await statement('0011_key_group_follows_owner.sql'));
    expect(h.sqlite.query('SELECT id, "group" FROM api_keys ORDER BY id').all()).toEqual(EXPECTED);
  }));

  test.skipIf(!pg)('PostgreSQL', async () => {
    const { sql } = await pgDb.open();
    for (const [id, name, group] of USERS) await sql`INSERT INTO users (id, username, password_hash, "group", created_at, updated_at) VALUES (${id}, ${name}, 'x', ${group}, 1, 1)`;
    for (const [id, user, group] of KEYS) await sql`INSERT INTO api_keys (id, user_id, key_hash, prefix, "group", created_at, updated_at) VALUES (${id}, ${user}, ${`h${id}`}, 'sk-', ${group}, 1, 1)`;
    await sql.unsafe(await statement('pg/0014_key_group_follows_owner.sql'));
    expect((await sql`SELECT id, "group" FROM api_keys ORDER BY id`).map((r) => ({ id: Number(r.id), group: r.group }))).toEqual(EXPECTED);
  });
});
