import { afterEach, beforeEach, describe, expect, test } from 'bun:test';
import { ChangeBus, nowSeconds } from '@gw/core';
import { ApiKeysRepo, LedgerRepo, SessionsRepo, UsersRepo, openDatabase, type DbHandle, type UserRow } from '@gw/db';
import { ApiKeyService } from './api-keys';
import { UserDirectory } from './user-directory';
import { UserService } from './users';

let dbh: DbHandle;
let bus: ChangeBus;
let users: UsersRepo;
let admin: UserService;
let dir: UserDirectory;
let keys: ApiKeyService;
let root: UserRow;
beforeEach(async () => {
  dbh = openDatabase(':memory:');
  bus = new ChangeBus();
  users = new UsersRepo(dbh.db);
  const now = nowSeconds();
  root = await users.insert({ username: 'root', passwordHash: 'x', role: 100, createdAt: now, updatedAt: now });
  admin = new UserService(users, new SessionsRepo(dbh.db), new LedgerRepo(dbh.db, bus), bus);
  dir = await UserDirectory.load(users, bus);
  keys = await ApiKeyService.load(new ApiKeysRepo(dbh.db), users, dir, bus);
});
afterEach(() => { keys.close(); dir.close(); dbh.close(); });

const newUser = async (role: 1 | 10 = 1) => (await users.byId((await admin.create(root, { username: `u${crypto.randomUUID().slice(0, 6)}`, password: 'password-123', role })).id))!;

describe('ApiKeyService index', () => {
  test('lookup is by the full key; other listeners hear apikey.changed', async () => {
    const u = await newUser();
    const heard: number[] = [];
    bus.on('apikey.changed', ({ keyId }) => { heard.push(keyId); });
    const { key, view } = await keys.create(u, { name: 'k' });
    expect(keys.lookup(key)).toMatchObject({ id: view.id, userId: u.id, status: 1, unlimitedQuota: true, models: null });
    expect(keys.lookup(key.slice(0, -1))).toBeUndefined();
    expect(heard).toEqual([view.id]);
  });

  test('external writes (relay settling quota) refresh the record on apikey.changed', async () => {
    const u = await newUser();
    const { key, view } = await keys.create(u, { name: 'k', unlimited_quota: false, remain_quota: 100 });
    dbh.sqlite.query('update api_keys set remain_quota = 40, used_quota = 60 where id = ?').run(view.id);
    expect(keys.lookup(key)?.remainQuota).toBe(100);
    await bus.emit('apikey.changed', { keyId: view.id });
    expect(keys.lookup(key)).toMatchObject({ remainQuota: 40, usedQuota: 60 });
  });

  test('keys of disabled or deleted users drop out at once and come back on enable', async () => {
    const u = await newUser();
    const { key } = await keys.create(u, { name: 'k' });
    await admin.setStatus(root, u.id, 2);
    expect(keys.lookup(key)).toBeUndefined();
    expect(dir.get(u.id)?.status).toBe(2);
    await admin.setStatus(root, u.id, 1);
    expect(keys.lookup(key)?.userId).toBe(u.id);
    // Balance changes (user.changed on every charge) leave the index alone.
    await bus.emit('user.changed', { userId: u.id });
    expect(keys.lookup(key)?.userId).toBe(u.id);
    await admin.delete(root, u.id);
    expect(keys.lookup(key)).toBeUndefined();
    expect(dir.get(u.id)).toBeUndefined();
  });

  test('disabling a user drops exactly its keys, touching neither the others nor the whole table', async () => {
    const [a, b] = [await newUser(), await newUser()];
    const repo = new ApiKeysRepo(dbh.db);
    let fullReads = 0;
    const spied = Object.assign(Object.create(repo), { all: () => { fullReads++; return repo.all(); } }) as ApiKeysRepo;
    const svc = await ApiKeyService.load(spied, users, dir, bus);
    const ka = [await svc.create(a, { name: 'a1' }), await svc.create(a, { name: 'a2' })];
    const kb = await svc.create(b, { name: 'b1' });
    await svc.update(a, { id: ka[0]!.view.id, name: 'a1-renamed' });
    expect(svc.lookup(ka[0]!.key)?.name).toBe('a1-renamed');
    await admin.setStatus(root, a.id, 2);
    expect(ka.map((k) => svc.lookup(k.key))).toEqual([undefined, undefined]);
    expect(svc.byId(ka[1]!.view.id)).toBeUndefined();
    expect(svc.lookup(kb.key)?.userId).toBe(b.id);
    await admin.setStatus(root, a.id, 1);
    expect(ka.map((k) => svc.lookup(k.key)?.id)).toEqual(ka.map((k) => k.view.id));
    await svc.delete(a, ka[1]!.view.id);
    await admin.setStatus(root, a.id, 2);
    await admin.setStatus(root, a.id, 1);
    // The deleted key stays gone after the owner's keys were dropped and re-read.
    expect(svc.lookup(ka[1]!.key)).toBeUndefined();
    expect(svc.lookup(ka[0]!.key)?.id).toBe(ka[0]!.view.id);
    expect(fullReads).toBe(1);
    svc.close();
  });

  test('a restart (new service on the same database) rebuilds the index', async () => {
    const u = await newUser();
    const { key } = await keys.create(u, { name: 'k' });
    const d2 = await UserDirectory.load(users, bus);
    const k2 = await ApiKeyService.load(new ApiKeysRepo(dbh.db), users, d2, bus);
    expect(k2.lookup(key)?.userId).toBe(u.id);
    k2.close();
    d2.close();
  });
});

describe('UserService rules', () => {
  test('initial quota is one ledger adjust entry; balance equals the ledger', async () => {
    const v = await admin.create(root, { username: 'rich', password: 'password-123', quota: 250 });
    expect(v.quota).toBe(250);
    expect(await new LedgerRepo(dbh.db).sum(v.id)).toBe(250);
  });

  test('admins manage lower roles only; root can do anything but delete a root or demote the last one', async () => {
    const a = await newUser(10);
    const plain = await newUser(1);
    const peer = await newUser(10);
    await expect(admin.create(a, { username: 'x-admin', password: 'password-123', role: 10 })).rejects.toMatchObject({ status: 403 });
    await expect(admin.update(a, { id: peer.id, display_name: 'x' })).rejects.toMatchObject({ status: 403 });
    await expect(admin.update(a, { id: plain.id, role: 10 })).rejects.toMatchObject({ status: 403, param: 'role' });
    expect((await admin.update(a, { id: plain.id, display_name: 'ok' })).display_name).toBe('ok');
    await expect(admin.delete(root, root.id)).rejects.toMatchObject({ code: 'cannot_delete_root' });
    await expect(admin.update(root, { id: root.id, role: 10 })).rejects.toMatchObject({ code: 'last_root' });
    await expect(admin.update(root, { id: plain.id, quota: 5 } as any)).rejects.toMatchObject({ code: 'quota_not_editable' });
  });
});
