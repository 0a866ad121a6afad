/**
 * The lock that serialises a user's redemption attempts across nodes (RedisKeyLocks) against a holder slower than its
 * lease (PostgreSQL slow to answer). Before, the lease lapsed under the running attempt and a second node's attempt
 * took the lock and ran beside it; the holder now renews its lease while it works, for 4 leases at most (a hung holder
 * renewing forever blocked its user's redemptions on every node). Against a real Redis and PostgreSQL, with a lease of
 * 1 s (renewed every 333 ms: an event-loop or GC stall of up to 0.6 s on a loaded machine does not lapse it; a 150 ms
 * lease did, at a 100 ms stall) and a first attempt stalled 3 s.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import type Redis from 'ioredis';
import { ChangeBus, GatewayError, sha256Hex } from '@gw/core';
import { KEY_LOCK_MAX_LEASES, RedisKeyLocks } from '@gw/core/redis/key-locks';
import { RedemptionService } from '../../libs/payments/src/redemption';
import { PgLedgerRepo, PgRedemptionCodesRepo, PgUsersRepo } from '../../libs/db/src/repos-pg';
import { openPgTestDb, requirePg, type PgTestDb } from '../helpers/postgres';
import { dropPrefix, freshPrefix, redisClient, requireRedis } from '../helpers/redis';

const ready = (await requirePg('tests/cluster/redeem-lock-lease.test.ts')) && (await requireRedis('tests/cluster/redeem-lock-lease.test.ts'));
const LEASE_MS = 1_000;
const STALL_MS = 3_000;
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

const locks = (opts: { ttlMs?: number; waitMs?: number; maxHeldMs?: number; onCapped?: (key: string) => void; onLost?: (key: string) => void } = {}) =>
  new RedisKeyLocks(redis, prefix, { ttlMs: LEASE_MS, waitMs: 5_000, ...opts });

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

  test('a holder that hangs keeps the lock for 4 leases, then it lapses and another node gets it', async () => {
    const capped: string[] = [];
    const a = locks({ onCapped: (key) => capped.push(key) });
    const b = locks({ waitMs: 3 * KEY_LOCK_MAX_LEASES * LEASE_MS });
    const heldAt = performance.now();
    const releaseA = await a.acquire('u2');
    expect(releaseA).not.toBeNull();
    // A's step never ends (until the test ends): B waits for the cap, not for ever.
    const releaseB = await b.acquire('u2');
    const waited = performance.now() - heldAt;
    expect(releaseB).not.toBeNull();
    expect(waited).toBeGreaterThanOrEqual(KEY_LOCK_MAX_LEASES * LEASE_MS - 50);
    expect(waited).toBeLessThan((KEY_LOCK_MAX_LEASES + 1) * LEASE_MS + 1_000);
    // Told when the lease lapsed under the running step (B could take it then): allowed a moment to arrive.
    for (let i = 0; i < 100 && capped.length === 0; i++) await Bun.sleep(10);
    expect(capped).toEqual(['u2']);
    // A's late release leaves B's lock alone.
    await releaseA!();
    expect(await redis.exists(`${prefix}{lk:u2}`)).toBe(1);
    await releaseB!();
  }, 20_000);

  test('a step that ends within its last lease is not reported capped, and its lock is released', async () => {
    const capped: string[] = [];
    // A 3 s lease renewed every second, capped at 2 leases: the renewal at about 3 s is the last (it takes the lease to
    // the cap at 6 s). Released a second after it and two before the cap: a loaded machine late by well over a second
    // still ends the step within its last lease.
    const lease = 3 * LEASE_MS;
    const a = locks({ ttlMs: lease, maxHeldMs: 2 * lease, onCapped: (key) => capped.push(key) });
    const release = await a.acquire('u3');
    expect(release).not.toBeNull();
    await Bun.sleep(4 * LEASE_MS);
    await release!();
    expect(await redis.exists(`${prefix}{lk:u3}`)).toBe(0);
    // Past the cap: still nothing told.
    await Bun.sleep(3 * LEASE_MS);
    expect(capped).toEqual([]);
  }, 20_000);

  test('a lock lost at its capping renewal is reported lost, not also capped', async () => {
    const [lost, capped]: [string[], string[]] = [[], []];
    // A 6 s lease capped at 1.2 leases: the first renewal (at about 2 s, time enough for the SET below on a loaded
    // machine) is already the last.
    const lease = 6 * LEASE_MS;
    const a = locks({ ttlMs: lease, maxHeldMs: 1.2 * lease, onLost: (key) => lost.push(key), onCapped: (key) => capped.push(key) });
    const release = await a.acquire('u4');
    expect(release).not.toBeNull();
    // Another holder's lock now (this one's lapsed, say): the capping renewal finds it gone.
    await redis.set(`${prefix}{lk:u4}`, 'someone-else', 'PX', 30_000);
    // Past the cap (7.2 s).
    await Bun.sleep(1.5 * lease);
    expect(lost).toEqual(['u4']);
    expect(capped).toEqual([]);
    await release!();
    // The other holder's lock is left alone.
    expect(await redis.get(`${prefix}{lk:u4}`)).toBe('someone-else');
  }, 30_000);
});
