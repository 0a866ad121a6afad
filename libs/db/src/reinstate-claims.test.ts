/**
 * The claims an older dispute reinstatement left behind go at the upgrade (SQLite 0023, PostgreSQL 0026): the calls
 * it recorded as finding no dispute, and its unnamed calls (id ending ":*"), which answered every later call
 * "duplicate". Other claims and every provider event stay. The route's behaviour: tests/e2e/webhook-refunds.test.ts.
 */
import { describe, expect, test } from 'bun:test';
import { requirePg } from '../../../tests/helpers/postgres';
import { pgSchemaOfFile, withSqliteFile } from '../../../tests/helpers/migration-dbs';

const pg = await requirePg('libs/db/src/reinstate-claims.test.ts');
const pgDb = pgSchemaOfFile('gw_reclaims', pg);
const migration = async (file: string) => Bun.file(new URL(`../../../drizzle/${file}`, import.meta.url)).text();
const ROWS: Array<[string, string, string]> = [
  ['stripe', 'operator:reinstate:T1:*', 'dispute_reinstated'],
  ['stripe', 'operator:reinstate:T2:d1', 'unknown_dispute'],
  ['creem', 'operator:reinstate:T3:*', 'ambiguous_dispute'],
  ['stripe', 'operator:reinstate:T4:d4', 'dispute_reinstated'],
  ['stripe', 'operator:reinstate:T5:d5', 'noop:dispute already reinstated'],
  ['stripe', 'evt_1', 'unknown_dispute'],
  ['creem', 'evt_2', 'credited'],
];
const insert = `INSERT INTO webhook_events (provider, event_id, type, outcome, received_at) VALUES ${ROWS.map(([p, id, o]) => `('${p}', '${id}', 'operator.dispute_reinstated', '${o}', 1)`).join(', ')}`;
const KEPT = ['evt_1', 'evt_2', 'operator:reinstate:T4:d4', 'operator:reinstate:T5:d5'];
const LEFT = 'SELECT event_id AS id FROM webhook_events';

describe('old reinstatement claims are dropped at the upgrade', () => {
  test('SQLite', () => withSqliteFile(async (h) => {
    h.sqlite.exec(insert);
    h.sqlite.exec(await migration('0023_reinstate_claims.sql'));
    expect((h.sqlite.query(LEFT).all() as Array<{ id: string }>).map((r) => r.id).sort()).toEqual(KEPT);
  }));

  test.skipIf(!pg)('PostgreSQL', async () => {
    const { sql } = await pgDb.open();
    await sql.unsafe(insert);
    await sql.unsafe(await migration('pg/0026_reinstate_claims.sql'));
    expect((await sql.unsafe(LEFT)).map((r) => r.id).sort()).toEqual(KEPT);
  });
});
