/**
 * Two gateways sharing one Redis must not share a key prefix. Redis keys are named by user, key and budget
 * ids, which both databases have: on one prefix, user 2 of one gateway is admitted against user 2 of the
 * other's balance, and each leader releases the other's holds. A node whose prefix belongs to another
 * database (or schema) does not start; with its own prefix it does.
 */
import { afterAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { openPostgres } from '@gw/db/pg';
import { dropSchema, freshSchema, PG_TEST_URL, requirePg } from '../helpers/postgres';
import { dropPrefix, freshPrefix, REDIS_TEST_URL, redisClient, requireRedis } from '../helpers/redis';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

const available = (await requirePg('tests/cluster/prefix-owner.test.ts')) && (await requireRedis('tests/cluster/prefix-owner.test.ts'));
const schemaA = freshSchema('gw_owner_a');
const schemaB = freshSchema('gw_owner_b');
const schemaC = freshSchema('gw_owner_c');
const schemaD = freshSchema('gw_owner_d');
const prefix = freshPrefix('owner');
const prefixD = freshPrefix('owner-d');
const otherPrefix = freshPrefix('owner-b');
const MODEL = 'owner-m';

const gateways: TestGateway[] = [];
let ant: Scripted | null = null;

afterAll(async () => {
  for (const g of gateways.reverse()) await g.stop().catch(() => {});
  await ant?.stop();
  if (available) await Promise.all([dropPrefix(prefix), dropPrefix(otherPrefix), dropPrefix(prefixD), dropSchema(schemaA), dropSchema(schemaB), dropSchema(schemaC), dropSchema(schemaD)]);
});

const env = (schema: string, redisPrefix: string) => ({
  DATABASE_URL: PG_TEST_URL, PG_SCHEMA: schema, REDIS_URL: REDIS_TEST_URL, REDIS_PREFIX: redisPrefix,
  SECRET_KEY: 'ef'.repeat(32),
});

describe.skipIf(!available)('one Redis prefix per database', () => {
  test('a gateway on another schema with the same REDIS_PREFIX refuses to start, naming the prefix; the first keeps serving; with its own prefix it starts at once', async () => {
    const a = await startGateway(env(schemaA, prefix));
    gateways.push(a);
    ant = upstream('anthropic', { usage: { input: 0, output: 10 } });
    await addChannel(a, { type: 'anthropic', url: ant.url, models: [MODEL] });
    await setPrice(a, MODEL);
    const u = await keyedUser(a, 1_000_000);
    expect((await send(a, u.key, msg(MODEL, { max_tokens: 10 }))).status).toBe(200);

    let refused: unknown = null;
    try {
      gateways.push(await startGateway(env(schemaB, prefix)));
    } catch (err) {
      refused = err;
    }
    expect(String(refused)).toContain(`REDIS_PREFIX "${prefix}" on this Redis belongs to another database or schema`);
    expect(String(refused)).toContain(`/${schemaA}/`);
    // Nothing of B's was left in A's prefix, and A admits as before.
    const redis = redisClient();
    try {
      expect(await redis.get(`${prefix}{owner}`)).toContain(`/${schemaA}/`);
    } finally {
      redis.disconnect();
    }
    expect((await send(a, u.key, msg(MODEL, { max_tokens: 10 }))).status).toBe(200);

    // The refused start claimed nothing: B's first start with its own prefix opens admission at once.
    const b = await startGateway(env(schemaB, otherPrefix));
    gateways.push(b);
    expect(b.logs.some((l) => l.includes('holds.recovering'))).toBe(false);
    await addChannel(b, { type: 'anthropic', url: ant.url, models: [MODEL] });
    await setPrice(b, MODEL);
    const v = await keyedUser(b, 1_000_000);
    expect((await send(b, v.key, msg(MODEL, { max_tokens: 10 }))).status).toBe(200);
  }, 30_000);

  test('after a Redis data loss the running nodes take the prefix back within HOLD_LEASE_MS/3: a node of another database still cannot start', async () => {
    const redis = redisClient();
    try {
      const owner = await redis.get(`${prefix}{owner}`);
      expect(owner).toContain(`/${schemaA}/`);
      await redis.del(`${prefix}{owner}`);
      // The default HOLD_LEASE_MS (30 s): taken back within 10 s.
      const t0 = Date.now();
      while ((await redis.get(`${prefix}{owner}`)) === null && Date.now() - t0 < 11_000) await Bun.sleep(100);
      expect(await redis.get(`${prefix}{owner}`)).toBe(owner);
    } finally {
      redis.disconnect();
    }
    let refused: unknown = null;
    try {
      gateways.push(await startGateway(env(schemaC, prefix)));
    } catch (err) {
      refused = err;
    }
    expect(String(refused)).toContain('belongs to another database or schema');
  }, 30_000);

  test('a node of the same database finds its own identity (a restart, another node): it starts', async () => {
    const again = await startGateway(env(schemaA, prefix));
    gateways.push(again);
    expect((await again.api('GET', '/api/user/self')).status).toBe(200);
  }, 30_000);

  test('a first start that failed after looking at the prefix (its transaction rolled back) leaves no claim: the next start of that database is not refused', async () => {
    // The first start's transaction fails at its commit (a deferred trigger stands in for a lost connection, a kill
    // or a Redis error after the prefix was looked at): the database keeps no trace of that start.
    const h = await openPostgres(PG_TEST_URL, { schema: schemaD, max: 1 });
    try {
      await h.sql.unsafe(`create function ${schemaD}.fail_first_start() returns trigger language plpgsql as $$ begin raise exception 'first start refused (test)'; end $$`);
      await h.sql.unsafe(`create constraint trigger fail_first_start after insert on ${schemaD}.admission_start deferrable initially deferred for each row execute function ${schemaD}.fail_first_start()`);
      let failed: unknown = null;
      try {
        gateways.push(await startGateway(env(schemaD, prefixD)));
      } catch (err) {
        failed = err;
      }
      expect(String(failed)).toContain('first start refused (test)');
      await h.sql.unsafe(`drop trigger fail_first_start on ${schemaD}.admission_start`);
    } finally {
      await h.close();
    }
    // The same database starts again: its prefix is not "another database's" because of its own rolled-back start.
    const d = await startGateway(env(schemaD, prefixD));
    gateways.push(d);
    expect((await d.api('GET', '/api/user/self')).status).toBe(200);
    const redis = redisClient();
    try {
      expect(await redis.get(`${prefixD}{owner}`)).toContain(`/${schemaD}/`);
    } finally {
      redis.disconnect();
    }
  }, 30_000);
});
