/**
 * Attack: revoke (disable or delete) a key while the key index is re-reading its owner's keys after the
 * owner was re-enabled. With PostgreSQL a pool can answer the older read last; that stale row must never
 * put the revoked key back in the index after the revoke call returned. Simulated with a store whose
 * per-user read is answered late (a snapshot taken at call time, delivered after the revoke).
 */
import { afterEach, beforeEach, expect, test } from 'bun:test';
import { ChangeBus, nowSeconds } from '@gw/core';
import { ApiKeysRepo, LedgerRepo, SessionsRepo, UsersRepo, openDatabase, type ApiKeyRow, type DbHandle, type UserRow } from '@gw/db';
import { ApiKeyService, UserDirectory, UserService } from '@gw/identity';

let dbh: DbHandle;
let bus: ChangeBus;
let users: UsersRepo;
let admin: UserService;
let dir: UserDirectory;
let keys: ApiKeyService;
let root: UserRow;
/** While set, byUser answers with what it read at call time only when this resolves. */
let gate: Promise<void> | null = null;

beforeEach(async () => {
  dbh = openDatabase(':memory:');
  bus = new ChangeBus();
  users = new UsersRepo(dbh.db);
  const now = nowSeconds();
  root = await users.insert({ username: 'root', passwordHash: 'x', role: 100, createdAt: now, updatedAt: now });
  admin = new UserService(users, new SessionsRepo(dbh.db), new LedgerRepo(dbh.db, bus), bus);
  dir = await UserDirectory.load(users, bus);
  const repo = new ApiKeysRepo(dbh.db);
  const slow = new Proxy(repo, {
    get(target, prop, recv) {
      if (prop !== 'byUser') return Reflect.get(target, prop, recv);
      return async (userId: number): Promise<ApiKeyRow[]> => {
        const snapshot = await target.byUser(userId);
        if (gate) await gate;
        return snapshot;
      };
    },
  });
  keys = await ApiKeyService.load(slow, users, dir, bus);
}, 30_000);
afterEach(() => { keys.close(); dir.close(); dbh.close(); gate = null; }, 30_000);

for (const revoke of ['disable', 'delete'] as const) {
  test(`a key ${revoke}d while the owner's re-enable is still reading stays revoked`, async () => {
    const u = (await users.byId((await admin.create(root, { username: `u${crypto.randomUUID().slice(0, 6)}`, password: 'password-123', role: 1 })).id))!;
    const { key, view } = await keys.create(u, { name: 'k' });
    await admin.setStatus(root, u.id, 2);
    expect(keys.lookup(key)).toBeUndefined();
    let open!: () => void;
    gate = new Promise((r) => { open = r; });
    const enabling = admin.setStatus(root, u.id, 1);
    await Bun.sleep(5);
    if (revoke === 'disable') await keys.update(u, { id: view.id, status: 2 });
    else await keys.delete(u, view.id);
    const served = () => { const k = keys.lookup(key); return k && k.status === 1; };
    expect(served()).toBeFalsy();
    open();
    await enabling;
    expect(served()).toBeFalsy();
  }, 30_000);
}

test('re-enabling a user still brings its keys back (no stale-read guard blocks a fresh read)', async () => {
  const u = (await users.byId((await admin.create(root, { username: `u${crypto.randomUUID().slice(0, 6)}`, password: 'password-123', role: 1 })).id))!;
  const { key } = await keys.create(u, { name: 'k' });
  await keys.create(u, { name: 'k2' });
  await admin.setStatus(root, u.id, 2);
  expect(keys.lookup(key)).toBeUndefined();
  await admin.setStatus(root, u.id, 1);
  expect(keys.lookup(key)?.status).toBe(1);
}, 30_000);
