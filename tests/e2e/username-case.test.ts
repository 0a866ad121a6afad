/**
 * Usernames are unique ignoring ASCII case (they are ASCII by rule): "Root" cannot be created beside "root", nor
 * a user renamed to "ADMIN" beside "admin", also when the writes race. A database that already holds such a pair
 * (written before this rule) keeps working: both log in by their exact name, and no new one can join them.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { hashPassword } from '@gw/identity';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); }, 30_000);
afterAll(async () => { await gw.stop(); });

const create = (username: string) => gw.api('POST', '/api/user/', { username, password: 'user-password-123' });
/** A user row inserted by the repository, under the service's checks (and its caches, which re-read on demand). */
const storedUser = async (username: string) => {
  const now = Math.floor(Date.now() / 1000);
  return gw.services.users.insert({ username, passwordHash: await hashPassword('user-password-123'), role: 1, status: 1, createdAt: now, updatedAt: now });
};
const login = async (username: string, password = 'user-password-123') => (await gw.api('POST', '/api/user/login', { username, password }, null)).status;
const fresh = () => `n${crypto.randomUUID().slice(0, 8)}`;

test('no user can be created whose name differs from an existing one only in case', async () => {
  for (const name of ['Root', 'ROOT', 'rOOt']) {
    const r = await create(name);
    expect([r.status, r.body.error.code, r.body.error.param]).toEqual([409, 'username_taken', 'username']);
  }
  const name = fresh();
  expect((await create(name)).status).toBe(200);
  expect((await create(name.toUpperCase())).body.error.code).toBe('username_taken');
  expect((await gw.services.users.list({ keyword: name, offset: 0, limit: 10 })).total).toBe(1);
});

test('renames: not to another user\'s name in another case; to one\'s own name in another case, yes', async () => {
  const a = await makeUser(gw);
  const b = await makeUser(gw);
  const r = await gw.api('PUT', '/api/user/', { id: b.id, username: a.username.toUpperCase() });
  expect([r.status, r.body.error.code]).toEqual([409, 'username_taken']);
  expect((await gw.api('PUT', '/api/user/', { id: b.id, username: 'ROOT' })).body.error.code).toBe('username_taken');
  expect((await gw.services.users.byId(b.id))!.username).toBe(b.username);
  const own = await gw.api('PUT', '/api/user/', { id: a.id, username: a.username.toUpperCase() });
  expect([own.status, own.body.data.username]).toEqual([200, a.username.toUpperCase()]);
  // Login matches the exact stored name.
  expect(await login(a.username.toUpperCase())).toBe(200);
});

test('race: concurrent creates and renames to case variants of one new name: exactly one wins', async () => {
  for (let round = 0; round < 3; round++) {
    const name = fresh();
    const variants = [name, name.toUpperCase(), name[0]!.toUpperCase() + name.slice(1), name.slice(0, -1) + name.slice(-1).toUpperCase()];
    const renamed = await makeUser(gw);
    const results = await Promise.all([
      ...variants.map((v) => create(v)),
      gw.api('PUT', '/api/user/', { id: renamed.id, username: name.toUpperCase().slice(0, 3) + name.slice(3) }),
    ]);
    expect(results.filter((r) => r.status === 200)).toHaveLength(1);
    for (const r of results.filter((x) => x.status !== 200)) expect([r.status, r.body.error.code]).toEqual([409, 'username_taken']);
    expect((await gw.services.users.list({ keyword: name, offset: 0, limit: 10 })).total).toBe(1);
  }
}, 30_000);

test('a database that already holds a case pair keeps working, and no third variant can join', async () => {
  const name = fresh();
  // Written straight to storage, as an older gateway could have (makeUser goes through the service, which refuses the pair).
  const lower = await makeUser(gw, 1, { username: name });
  const upper = await storedUser(name.toUpperCase());
  expect(await login(name)).toBe(200);
  expect(await login(name.toUpperCase())).toBe(200);
  expect((await create(name[0]!.toUpperCase() + name.slice(1))).body.error.code).toBe('username_taken');
  const other = await makeUser(gw);
  expect((await gw.api('PUT', '/api/user/', { id: other.id, username: name.toUpperCase() })).body.error.code).toBe('username_taken');
  // Either may still be edited, and renamed out of the pair.
  expect((await gw.api('PUT', '/api/user/', { id: upper.id, display_name: 'x' })).status).toBe(200);
  expect((await gw.api('PUT', '/api/user/', { id: upper.id, username: `${name}-2` })).status).toBe(200);
  expect((await gw.api('PUT', '/api/user/', { id: lower.id, group: 'default' })).status).toBe(200);
});
