/**
 * A start-up refused after the database was opened (a setting read late, here an incomplete payment
 * provider) gives the database back: on SQLite the file's process lock, on PostgreSQL the connections and
 * the leadership of the schema. Before, a second gateway on the same database in the same process was
 * refused (SQLite: "in use") or never led (PostgreSQL: its prober never ran).
 */
import { afterAll, expect, test } from 'bun:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ON_PG, startGateway } from '../helpers/gateway';
import { dropSchema, freshSchema, PG_TEST_URL } from '../helpers/postgres';
import { freshPrefix, REDIS_TEST_URL } from '../helpers/redis';

const dir = mkdtempSync(join(tmpdir(), 'gw-startfail-'));
const schema = freshSchema('gw_startfail');
const env: Record<string, string> = ON_PG
  ? { DATABASE_URL: PG_TEST_URL, PG_SCHEMA: schema, REDIS_URL: REDIS_TEST_URL, REDIS_PREFIX: freshPrefix('startfail'), SECRET_KEY: 'ab'.repeat(32) }
  : { DATABASE_URL: `sqlite:${join(dir, 'gateway.db')}` };

afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  if (ON_PG) await dropSchema(schema);
});

test('a start-up refused after the database opened releases it: the next gateway on the same database starts and leads', async () => {
  await expect(startGateway({ ...env, PROVIDER_B_API_KEY: 'k', PROVIDER_B_WEBHOOK_SECRET: 's' })).rejects.toThrow('PROVIDER_B_PRODUCT_ID');
  const gw = await startGateway(env);
  try {
    expect(gw.services.backend.leader.isLeader).toBe(true);
    expect((await gw.api('GET', '/health')).status).toBe(200);
  } finally {
    await gw.stop();
  }
}, 30_000);
