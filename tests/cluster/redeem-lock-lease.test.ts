/**
 * The lock that serialises a user's redemption attempts across nodes (RedisKeyLocks) against a holder slower than its
 * lease (PostgreSQL slow to answer). Before, the lease lapsed under the running attempt and a second node's attempt
 * took the lock and ran beside it; the holder now renews its lease while it works. Against a real Redis and
 * PostgreSQL, with a lease of 150 ms and a first attempt stalled 700 ms.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import type Redis from 'ioredis';
import { ChangeBus, GatewayError, sha256Hex } from '@gw/core';
import { RedisKeyLocks } from '@gw/core/redis/key-locks';
import { RedemptionService } from '../../libs/payments/src/redemption';
import { PgLedgerRepo, PgRedemptionCodesRepo, PgUsersRepo } from '../../libs/db/src/repos-pg';
import { openPgTestDb, requirePg, type PgTestDb } from '../helpers/postgres';
import { dropPrefix, freshPrefix, redisClient, requireRedis } from '../helpers/redis';

const ready = (await requirePg('tests/cluster/redeem-lock-lease.test.ts')) && (await requireRedis('tests/cluster/redeem-lock-lease.test.ts'));
const LEASE_MS = 150;
const STALL_MS = 700;
const prefix = freshPrefix('redeem-lease');
let t: PgTestDb;
let redis: Redis;

beforeAll(async () => {
  if (!ready) return;
  t = await openPgTestDb('gw_redeem_lease');
  redis = redisClient();
});
afterAll(async () => {
  if (!ready) return;
  redis.disconnect();
  await dropPrefix(prefix);
  await t.close();
});

const locks = () => new RedisKeyLocks(redis, prefix, { ttlMs: LEASE_MS, waitMs: 5_000 });

describe.skipIf(!ready)('a lock held past its lease', () => {
  test('a second node does not get it until the first releases', async () => {
    const [a, b] = [locks(), locks()];
    const releaseA = await a.acquire('u1');
    expect(releaseA).not.toBeNull();
    let releasedAt = 0;
    const first = (async () => {
      await Bun.sleep(STALL_MS);
      releasedAt = performance.now();
      await releaseA!();
    })();
    await Bun.sleep(LEASE_MS / 2);
    const releaseB = await b.acquire('u1');
    const takenAt = performance.now();
    await first;
    expect(releaseB).not.toBeNull();
    expect(takenAt).toBeGreaterThanOrEqual(releasedAt);
    await releaseB!();
    // Released, and no longer renewed: the key is free at once, and stays free.
    await Bun.sleep(LEASE_MS);
    expect(await redis.exists(`${prefix}{lk:u1}`)).toBe(0);
  }, 20_000);

  test('two nodes redeeming one code for one user, the first stalled past the lease: one runs at a time, credited once', async () => {
    const { db } = t.handle;
    const users = new PgUsersRepo(db);
    const user = await users.insert({ username: 'lease', passwordHash: 'h', quota: 0, createdAt: 1, updatedAt: 1 });
    const codes = new PgRedemptionCodesRepo(db);
    const code = 'gwr_leaseleaseleaseleaselea';
    await codes.insertBatch([{ codeHash: sha256Hex(code), prefix: code.slice(0, 8), batch: 'lease', quota: 500, expiresAt: Math.floor(Date.now() / 1000) + 3600, createdBy: user.id, createdAt: 1 }]);
    const real = new PgLedgerRepo(db);
    let running = 0;
    let most = 0;
    let calls = 0;
    // Every node's ledger: the first attempt to reach it stalls (a slow database) before its transaction.
    const ledger = new Proxy(real, {
      get: (target, prop, receiver) => prop !== 'redeemCodeOnce' ? Reflect.get(target, prop, receiver)
        : async (...args: Parameters<PgLedgerRepo['redeemCodeOnce']>) => {
          most = Math.max(most, ++running);
          try {
            if (calls++ === 0) await Bun.sleep(STALL_MS);
            return await target.redeemCodeOnce(...args);
          } finally {
            running--;
          }
        },
    });
    const node = () => {
      const l = locks();
      return new RedemptionService(codes as never, ledger, new ChangeBus(), { maxFailures: 5, windowSeconds: 600 }, users, Date.now, undefined, (k) => l.acquire(k));
    };
    const [n1, n2] = [node(), node()];
    const first = n1.redeem(user.id, code).then((r) => r.quota, (e: GatewayError) => e.code);
    await Bun.sleep(LEASE_MS * 2);
    const second = await n2.redeem(user.id, code).then((r) => r.quota, (e: GatewayError) => e.code);
    expect([await first, second]).toEqual([500, 'invalid_code']);
    expect(most).toBe(1);
    const [row] = await t.handle.sql<{ quota: string; credits: string }[]>`
      select u.quota, (select count(*) from ledger l where l.user_id = u.id and l.kind = 'redeem') as credits from users u where u.id = ${user.id}`;
    expect([Number(row!.quota), Number(row!.credits)]).toEqual([500, 1]);
  }, 20_000);
});
