/**
 * Long-context tiers stored with the old 1-hour default (a copy of the tier's 5-minute price) are raised to the new
 * one, 8/5 of it rounded up, at the upgrade (SQLite 0024, PostgreSQL 0027); a tier with its own 1-hour price, a
 * free tier and a model without a tier stay. The pricing itself: libs/billing/src/tiers.test.ts.
 */
import { describe, expect, test } from 'bun:test';
import { requirePg } from '../../../tests/helpers/postgres';
import { pgSchemaOfFile, withSqliteFile } from '../../../tests/helpers/migration-dbs';

const pg = await requirePg('libs/db/src/long-context-1h.test.ts');
const pgDb = pgSchemaOfFile('gw_lc1h', pg);
const migration = async (file: string) => Bun.file(new URL(`../../../drizzle/${file}`, import.meta.url)).text();
const tier = (cacheWrite: number, cacheWrite1h: number) => JSON.stringify({ input: 6_000_000, output: 22_500_000, cacheRead: 600_000, cacheWrite, cacheWrite1h });
const ROWS: Array<[string, string | null]> = [
  ['old-default', tier(7_500_000, 7_500_000)],
  ['odd', tier(3, 3)],
  ['dearest', tier(900_000_000_000, 900_000_000_000)],
  ['own-1h', tier(7_500_000, 9_000_000)],
  ['free', tier(0, 0)],
  ['no-tier', null],
];
const insert = `INSERT INTO prices (model, input, output, updated_at, long_context_threshold, long_context) VALUES ${ROWS.map(([m, lc]) => `('${m}', 1, 1, 1, ${lc ? 200000 : 'NULL'}, ${lc ? `'${lc}'` : 'NULL'})`).join(', ')}`;
const EXPECTED = { 'old-default': 12_000_000, odd: 5, dearest: 1_000_000_000_000, 'own-1h': 9_000_000, free: 0, 'no-tier': null };
const oneHour = (rows: Array<{ model: string; lc: unknown }>) => Object.fromEntries(rows.map((r) => {
  const lc = typeof r.lc === 'string' ? JSON.parse(r.lc) : r.lc;
  return [r.model, lc ? lc.cacheWrite1h : null];
}));
const LEFT = 'SELECT model, long_context AS lc FROM prices';

describe('long-context tiers with the old 1-hour default are raised to 8/5 of their 5-minute price', () => {
  test('SQLite', () => withSqliteFile(async (h) => {
    h.sqlite.exec(insert);
    h.sqlite.exec(await migration('0024_long_context_1h_default.sql'));
    expect(oneHour(h.sqlite.query(LEFT).all() as Array<{ model: string; lc: unknown }>)).toEqual(EXPECTED);
  }));

  test.skipIf(!pg)('PostgreSQL', async () => {
    const { sql } = await pgDb.open();
    await sql.unsafe(insert);
    await sql.unsafe(await migration('pg/0027_long_context_1h_default.sql'));
    expect(oneHour(await sql.unsafe(LEFT) as unknown as Array<{ model: string; lc: unknown }>)).toEqual(EXPECTED);
  });
});
