/**
 * A test gateway's schema is emptied and handed to the next gateway of the process. Emptied with DELETE alone,
 * a table that had held 200k usage rows kept its pages, and every scan of the next gateway read them (an
 * unindexed log filter: 57-83 ms on an empty table, over the fuzz test's 50 ms bound under a full run).
 */
import { expect, test } from 'bun:test';
import postgres from 'postgres';
import { PG_TEST_URL, requirePg } from './postgres';
import { returnSchema, takeSchema } from './pg-schemas';

const pgUp = await requirePg('pg-schemas');

test.skipIf(!pgUp)('a returned schema is empty, small and numbered from 1 again; foreign keys do not stand in the way', async () => {
  const schema = await takeSchema();
  const sql = postgres(PG_TEST_URL, { max: 1, onnotice: () => {} });
  try {
    await sql.unsafe(`create schema if not exists "${schema}"`);
    await sql.unsafe(`create table "${schema}".owners (id serial primary key)`);
    await sql.unsafe(`create table "${schema}".big (id bigserial primary key, owner int references "${schema}".owners(id), pad text)`);
    await sql.unsafe(`create table "${schema}".small (id serial primary key, owner int references "${schema}".owners(id) on delete cascade)`);
    await sql.unsafe(`insert into "${schema}".owners default values`);
    await sql.unsafe(`insert into "${schema}".big (owner, pad) select 1, repeat('x', 100) from generate_series(1, 50000)`);
    await sql.unsafe(`insert into "${schema}".small (owner) values (1)`);
    const size = async (t: string) => Number((await sql.unsafe(`select pg_relation_size('"${schema}".${t}') as n`))[0]!.n);
    expect(await size('big')).toBeGreaterThan(4_000_000);
    await returnSchema(schema);
    for (const t of ['owners', 'big', 'small']) expect(Number((await sql.unsafe(`select count(*) as n from "${schema}".${t}`))[0]!.n)).toBe(0);
    expect(await size('big')).toBeLessThan(100_000);
    const [again] = await sql.unsafe(`insert into "${schema}".owners default values returning id`);
    expect(again!.id).toBe(1);
    expect(await takeSchema()).toBe(schema);
  } finally {
    await sql.unsafe(`drop schema if exists "${schema}" cascade`);
    await sql.end({ timeout: 1 });
  }
});
