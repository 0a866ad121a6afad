import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import type postgres from 'postgres';
import { ChangeBus } from '@gw/core';
import { createPgStores, openPostgres, PgChangeFeed, type PgHandle } from '@gw/db/pg';
import type { ApiKeysStore, UsersStore } from '@gw/db';
import { ApiKeyService } from './api-keys';
import { UserDirectory } from './user-directory';
import { PG_TEST_URL, dropSchema, freshSchema, requirePg } from '../../../tests/helpers/postgres';
import { countReads, until } from '../../../tests/helpers/follower';

/**
 * Two nodes on one PostgreSQL schema: A writes (plain SQL, as a bulk operation would), B follows through the change
 * feed with its user directory and key index. Every row changed is announced on its own; B must apply a burst in
 * batches (a few reads, not one per row), never end stale, and still apply a lone revocation within a second.
 */
const available = await requirePg('libs/identity/src/identity-feed.test.ts');
const schema = freshSchema('gw_idfeed');
let a: PgHandle;
let b: PgHandle;
let sql: postgres.Sql;
let dirB: UserDirectory;
let keysB: ApiKeyService;
let feed: PgChangeFeed;
/** B's reads of changed rows (byId or byIds calls), per table. */
const reads = { users: 0, keys: 0 };

beforeAll(async () => {
  if (!available) return;
  a = await openPostgres(PG_TEST_URL, { schema, max: 4 });
  b = await openPostgres(PG_TEST_URL, { schema, max: 4 });
  sql = a.sql;
  const busB = new ChangeBus();
  const real = createPgStores(b.db, busB);
  const users: UsersStore = countReads(real.users, ['byId', 'byIds'], () => reads.users++);
  const keys: ApiKeysStore = countReads(real.apiKeys, ['byId', 'byIds', 'byUser', 'byUsers'], () => reads.keys++);
  dirB = await UserDirectory.load(users, busB);
  keysB = await ApiKeyService.load(keys, users, dirB, busB, { maxKeysPerUser: 0 });
  feed = await PgChangeFeed.start({
    url: PG_TEST_URL, schema, bus: busB, resyncMs: 0,
    onResync: async () => { await dirB.reloadAll(); await keysB.reloadAll(); },
  });
});

afterAll(async () => {
  if (!available) return;
  await feed?.close();
  keysB?.close();
  dirB?.close();
  await Promise.all([a?.close(), b?.close()]);
  await dropSchema(schema);
});

const N = 2000;

describe.skipIf(!available)('user directory and key index following another node (PostgreSQL)', () => {
  let userIds: number[] = [];
  let keyIds: number[] = [];

  test(`${N} users and their keys inserted, keys disabled, then users disabled: each burst applied in a few reads, not one per row`, async () => {
    const before = { ...reads };
    userIds = (await sql<{ id: string }[]>`insert into users (username, password_hash, created_at, updated_at)
      select 'bulk-' || g, 'x', 1, 1 from generate_series(1, ${N}) g returning id`).map((r) => Number(r.id));
    keyIds = (await sql<{ id: string }[]>`insert into api_keys (user_id, name, key_hash, prefix, created_at, updated_at)
      select id, 'bulk', 'bulk-hash-' || id, 'sk-bulk', 1, 1 from users where username like 'bulk-%' returning id`).map((r) => Number(r.id));
    await until(20_000, () => keyIds.every((id) => keysB.byId(id)?.status === 1));
    expect(userIds.every((id) => dirB.get(id)?.status === 1)).toBe(true);
    // Generous: one per burst B happened to split the notifications into; the old path made N of each.
    expect(reads.users - before.users).toBeLessThan(N / 10);
    expect(reads.keys - before.keys).toBeLessThan(N / 10);

    const mid = { ...reads };
    await sql`update api_keys set status = 2 where name = 'bulk'`;
    await until(20_000, () => keyIds.every((id) => keysB.byId(id)?.status === 2));
    expect(reads.keys - mid.keys).toBeLessThan(N / 10);

    const late = { ...reads };
    await sql`update users set status = 2 where username like 'bulk-%'`;
    await until(20_000, () => userIds.every((id) => dirB.get(id)?.status === 2));
    // A disabled owner's keys leave the index (the relay refuses them); still known as that user's.
    expect(keyIds.every((id) => keysB.byId(id) === undefined && keysB.ownerOf(id) !== undefined)).toBe(true);
    expect(reads.users - late.users).toBeLessThan(N / 10);
  }, 60_000);

  test('users re-enabled in bulk get their keys back in a few reads; a key revoked meanwhile is revoked on the other node within a second', async () => {
    const [u] = await sql<{ id: string }[]>`insert into users (username, password_hash, created_at, updated_at) values ('lone', 'x', 1, 1) returning id`;
    const [k] = await sql<{ id: string }[]>`insert into api_keys (user_id, name, key_hash, prefix, created_at, updated_at) values (${u!.id}, 'lone', 'lone-hash', 'sk-lone', 1, 1) returning id`;
    const keyId = Number(k!.id);
    await until(5_000, () => keysB.byId(keyId)?.status === 1);
    // Every bulk user re-enabled (a re-enable re-reads that user's keys), and the key revoked right after.
    const before = reads.keys;
    await sql`update users set status = 1 where username like 'bulk-%'`;
    await sql`update api_keys set status = 2 where id = ${keyId}`;
    const t0 = performance.now();
    await until(1_000, () => keysB.byId(keyId)?.status === 2);
    expect(performance.now() - t0).toBeLessThan(1_000);
    await until(20_000, () => keyIds.every((id) => keysB.byId(id)?.status === 2));
    // The re-enabled users' keys were read back in batches too (the old path read each user's keys alone).
    expect(reads.keys - before).toBeLessThan(N / 10);
  }, 30_000);

  test('key creates, changes and deletes and user changes interleaved in a burst end equal to the tables on the other node', async () => {
    const owners = userIds.slice(0, 60);
    await Promise.all(owners.map(async (userId, i) => {
      const [k] = await sql<{ id: string }[]>`insert into api_keys (user_id, name, key_hash, prefix, created_at, updated_at)
        values (${userId}, 'burst', ${`burst-hash-${i}`}, 'sk-burst', 1, 1) returning id`;
      if (i % 4 === 0) await sql`delete from api_keys where id = ${k!.id}`;
      else if (i % 4 === 1) await sql`update api_keys set status = 2, rate_limit_rpm = ${i} where id = ${k!.id}`;
      else if (i % 4 === 2) await sql`update users set status = 2, "group" = 'moved' where id = ${userId}`;
      else await sql`delete from users where id = ${userId}`;
    }));
    const keyRows = await sql<{ id: string; status: number; rpm: number; uid: string; ustatus: number }[]>`
      select k.id, k.status, k.rate_limit_rpm as rpm, u.id as uid, u.status as ustatus from api_keys k join users u on u.id = k.user_id`;
    const userRows = await sql<{ id: string; status: number; group: string }[]>`select id, status, "group" from users`;
    const want = {
      users: userRows.map((u) => `${u.id}:${u.status}:${u.group}`).sort().join(),
      // What the relay sees: a key of an enabled owner, with its status and limits; none of a disabled or deleted one.
      keys: keyRows.filter((r) => r.ustatus === 1).map((r) => `${r.id}:${r.status}:${r.rpm}`).sort().join(),
    };
    const allKeyIds = (await sql<{ id: string }[]>`select id from api_keys`).map((r) => Number(r.id));
    const seen = () => ({
      users: userRows.map((u) => dirB.get(Number(u.id))).filter((x) => x).map((x) => `${x!.id}:${x!.status}:${x!.group}`).sort().join(),
      keys: allKeyIds.map((id) => keysB.byId(id)).filter((x) => x).map((x) => `${x!.id}:${x!.status}:${x!.rateLimitRpm}`).sort().join(),
    });
    await until(20_000, () => seen().users === want.users && seen().keys === want.keys);
    // The deleted users are gone from B's directory too.
    for (const [i, userId] of owners.entries()) if (i % 4 === 3) expect(dirB.get(userId)).toBeUndefined();
  }, 60_000);
});
