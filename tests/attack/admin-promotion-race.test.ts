/**
 * An admin may act only on users of a lower role. The rule was checked on the row read at the start of the request,
 * and the write landed later (a new password is hashed in between): a user root promoted to admin meanwhile got the
 * admin's password, or was disabled or deleted by a peer admin. The write now lands only while the target's role is
 * still below the actor's (403 role_too_high otherwise, nothing changed). The race is made certain by holding the
 * admin's write until root's promotion has answered. The same holds the other way round: an admin demoted while its
 * request runs no longer acts with the role it lost (the actor's role is read by the write too). Over real HTTP, on
 * every backend. A root demoted meanwhile cannot grant the role it lost, and an actor disabled meanwhile writes nothing.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { holdWrites, whileHeld } from '../helpers/hold-writes';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startGateway();
}, 30_000);
afterAll(async () => {
  await gw.stop();
});

const login = (username: string, password: string) => gw.api('POST', '/api/user/login', { username, password }, null);
const promote = async (id: number) => expect((await gw.api('PUT', '/api/user/', { id, role: 10 })).status).toBe(200);
const demote = async (id: number) => expect((await gw.api('PUT', '/api/user/', { id, role: 1 })).status).toBe(200);

test('a password an admin sets lands only while the target is still below the admin', async () => {
  const admin = await makeUser(gw, 10);
  const u = await makeUser(gw, 1);
  const hold = holdWrites(gw.services.users, 'update', ([id]) => id === u.id);
  const r = await whileHeld(hold, () => gw.api('PUT', '/api/user/', { id: u.id, password: 'admin-chosen-pass-1' }, admin.token), () => promote(u.id));
  expect([r.status, r.body.error?.code]).toEqual([403, 'role_too_high']);
  expect((await login(u.username, 'admin-chosen-pass-1')).status).toBe(401);
  expect((await login(u.username, u.password)).status).toBe(200);
  expect((await gw.api('GET', `/api/user/${u.id}`)).body.data.role).toBe(10);
}, 20_000);

test('a disable by an admin lands only while the target is still below the admin', async () => {
  const admin = await makeUser(gw, 10);
  const u = await makeUser(gw, 1);
  const hold = holdWrites(gw.services.users, 'updateKeepingRoot', ([id, patch]) => id === u.id && patch.status === 2);
  const r = await whileHeld(hold, () => gw.api('POST', `/api/user/${u.id}/disable`, undefined, admin.token), () => promote(u.id));
  expect([r.status, r.body.error?.code]).toEqual([403, 'role_too_high']);
  expect((await gw.api('GET', `/api/user/${u.id}`)).body.data).toMatchObject({ role: 10, status: 1 });
  expect((await login(u.username, u.password)).status).toBe(200);
}, 20_000);

test('a delete by an admin lands only while the target is still below the admin', async () => {
  const admin = await makeUser(gw, 10);
  const u = await makeUser(gw, 1);
  const hold = holdWrites(gw.services.users, 'delete', ([id]) => id === u.id);
  const r = await whileHeld(hold, () => gw.api('DELETE', `/api/user/${u.id}`, undefined, admin.token), () => promote(u.id));
  expect([r.status, r.body.error?.code]).toEqual([403, 'role_too_high']);
  expect((await gw.api('GET', `/api/user/${u.id}`)).body.data.role).toBe(10);
}, 20_000);

test('a password set by an admin demoted meanwhile does not land', async () => {
  const admin = await makeUser(gw, 10);
  const u = await makeUser(gw, 1);
  const hold = holdWrites(gw.services.users, 'update', ([id]) => id === u.id);
  const r = await whileHeld(hold, () => gw.api('PUT', '/api/user/', { id: u.id, password: 'demoted-admin-pass-1' }, admin.token), () => demote(admin.id));
  expect([r.status, r.body.error?.code]).toEqual([403, 'role_too_high']);
  expect((await login(u.username, 'demoted-admin-pass-1')).status).toBe(401);
  expect((await login(u.username, u.password)).status).toBe(200);
}, 20_000);

test('a disable by an admin demoted meanwhile does not land', async () => {
  const admin = await makeUser(gw, 10);
  const u = await makeUser(gw, 1);
  const hold = holdWrites(gw.services.users, 'updateKeepingRoot', ([id, patch]) => id === u.id && patch.status === 2);
  const r = await whileHeld(hold, () => gw.api('POST', `/api/user/${u.id}/disable`, undefined, admin.token), () => demote(admin.id));
  expect([r.status, r.body.error?.code]).toEqual([403, 'role_too_high']);
  expect((await gw.api('GET', `/api/user/${u.id}`)).body.data).toMatchObject({ role: 1, status: 1 });
  expect((await login(u.username, u.password)).status).toBe(200);
}, 20_000);

test('a delete by an admin demoted meanwhile does not land', async () => {
  const admin = await makeUser(gw, 10);
  const u = await makeUser(gw, 1);
  const hold = holdWrites(gw.services.users, 'delete', ([id]) => id === u.id);
  const r = await whileHeld(hold, () => gw.api('DELETE', `/api/user/${u.id}`, undefined, admin.token), () => demote(admin.id));
  expect([r.status, r.body.error?.code]).toEqual([403, 'role_too_high']);
  expect((await gw.api('GET', `/api/user/${u.id}`)).status).toBe(200);
  expect((await login(u.username, u.password)).status).toBe(200);
}, 20_000);

test('a root demoted meanwhile cannot grant the root role it lost', async () => {
  const root2 = await makeUser(gw, 100);
  const u = await makeUser(gw, 1);
  const hold = holdWrites(gw.services.users, 'updateKeepingRoot', ([id, patch]) => id === u.id && patch.role === 100);
  const r = await whileHeld(hold, () => gw.api('PUT', '/api/user/', { id: u.id, role: 100 }, root2.token),
    async () => expect((await gw.api('PUT', '/api/user/', { id: root2.id, role: 10 })).status).toBe(200));
  expect([r.status, r.body.error?.code]).toEqual([403, 'role_too_high']);
  expect((await gw.api('GET', `/api/user/${u.id}`)).body.data.role).toBe(1);
}, 20_000);

test('an admin disabled meanwhile writes nothing', async () => {
  const admin = await makeUser(gw, 10);
  const u = await makeUser(gw, 1);
  const hold = holdWrites(gw.services.users, 'update', ([id]) => id === u.id);
  const r = await whileHeld(hold, () => gw.api('PUT', '/api/user/', { id: u.id, password: 'disabled-admin-pass-1' }, admin.token),
    async () => expect((await gw.api('POST', `/api/user/${admin.id}/disable`)).status).toBe(200));
  expect([r.status, r.body.error?.code]).toEqual([403, 'role_too_high']);
  expect((await login(u.username, 'disabled-admin-pass-1')).status).toBe(401);
  expect((await login(u.username, u.password)).status).toBe(200);
}, 20_000);
