/**
 * Attack: with a stolen session, write a relay key's wider value back while its owner narrows it. `PUT /api/token/`
 * reads the key, then writes; if the owner's narrowing lands in between, the thief's write (the wide value as it
 * read it) restores what the owner took away. Compared with what it read, nothing widened and no notice went out;
 * compared with what the write replaced, it did. The interleaving is forced: the key store answers the thief's
 * read with what it held, only after the owner's write has gone through.
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
let owner: UserRow;
/** Runs once, between the next byId's read and its answer (the owner's write landing in the thief's window). */
let between: (() => Promise<unknown>) | null = null;

beforeEach(async () => {
  dbh = openDatabase(':memory:');
  bus = new ChangeBus();
  users = new UsersRepo(dbh.db);
  const now = nowSeconds();
  const root = await users.insert({ username: 'root', passwordHash: 'x', role: 100, createdAt: now, updatedAt: now });
  admin = new UserService(users, new SessionsRepo(dbh.db), new LedgerRepo(dbh.db, bus), bus);
  dir = await UserDirectory.load(users, bus);
  const repo = new ApiKeysRepo(dbh.db);
  const late = new Proxy(repo, {
    get(target, prop, recv) {
      if (prop !== 'byId') return Reflect.get(target, prop, recv);
      return async (id: number): Promise<ApiKeyRow | undefined> => {
        const read = await target.byId(id);
        const run = between;
        between = null;
        if (run) await run();
        return read;
      };
    },
  });
  keys = await ApiKeyService.load(late, users, dir, bus);
  owner = (await users.byId((await admin.create(root, { username: `u${crypto.randomUUID().slice(0, 6)}`, password: 'password-123', role: 1 })).id))!;
});
afterEach(() => { keys.close(); dir.close(); dbh.close(); between = null; });

test('the thief restoring an allow-list the owner just narrowed is reported as widening', async () => {
  const { view } = await keys.create(owner, { name: 'k', allow_ips: ['10.0.0.0/8'] });
  // The owner narrows to one /16 while the thief's update (writing the /8 it saw) is between its read and its write.
  between = () => keys.update(owner, { id: view.id, allow_ips: ['10.1.0.0/16'] });
  const r = await keys.change(owner, { id: view.id, allow_ips: ['10.0.0.0/8'] });
  expect(r.view.allow_ips).toEqual(['10.0.0.0/8']);
  expect(r.widened).toEqual(['IP allow-list: now also 10.0.0.0/8']);
});

test('the thief re-enabling a key the owner just disabled is reported as made usable again', async () => {
  const { view } = await keys.create(owner, { name: 'k' });
  between = () => keys.update(owner, { id: view.id, status: 2 });
  const r = await keys.change(owner, { id: view.id, status: 1, name: 'k' });
  expect(r.view.status).toBe(1);
  expect(r.revived).toBe(true);
});

test('a quota the owner lowered in between, written back, is a raise', async () => {
  const { view } = await keys.create(owner, { name: 'k', unlimited_quota: false, remain_quota: 1_000 });
  between = () => keys.update(owner, { id: view.id, remain_quota: 10 });
  const r = await keys.change(owner, { id: view.id, remain_quota: 1_000 });
  expect(r.widened).toEqual(['quota: raised from 10 to 1000']);
});
