import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

const uname = (p = 'user') => `${p}${crypto.randomUUID().slice(0, 8)}`;
const createUser = async (body: Record<string, unknown>, token?: string) => gw.api('POST', '/api/user/', { username: uname(), password: 'password-123', ...body }, token);
const login = (username: string, password: string) => gw.api('POST', '/api/user/login', { username, password }, null);

describe('users: create / get / list / update / delete', () => {
  test('Create User returns the user without secrets; initial quota goes through the ledger', async () => {
    const username = uname();
    const r = await gw.api('POST', '/api/user/', { username, password: 'password-123', display_name: 'Ann', group: 'vip', quota: 5000, email: 'ann@example.com' });
    expect(r.status).toBe(200);
    expect(r.body.data).toMatchObject({ username, display_name: 'Ann', role: 1, status: 1, group: 'vip', quota: 5000, email: 'ann@example.com' });
    expect(JSON.stringify(r.body)).not.toMatch(/password|totp_secret/);
    expect(await gw.services.ledger.sum(r.body.data.id)).toBe(5000);
    const rows = (await gw.db.all('select kind, amount, ref from ledger where user_id = ?', r.body.data.id));
    expect(rows).toEqual([{ kind: 'adjust', amount: 5000, ref: `user-create:${r.body.data.id}` }]);
    expect((await login(username, 'password-123')).status).toBe(200);
    // No quota: no ledger row, balance 0.
    const z = await createUser({});
    expect(z.body.data.quota).toBe(0);
    expect(await gw.services.ledger.sum(z.body.data.id)).toBe(0);
  });

  test('409 for a taken username or e-mail', async () => {
    const username = uname();
    await gw.api('POST', '/api/user/', { username, password: 'password-123', email: 'dup@example.com' });
    const again = await gw.api('POST', '/api/user/', { username, password: 'password-123' });
    expect(again.status).toBe(409);
    expect(again.body.error).toMatchObject({ code: 'username_taken', param: 'username' });
    const mail = await createUser({ email: 'DUP@example.com' });
    expect(mail.status).toBe(409);
    expect(mail.body.error.code).toBe('email_taken');
  });

  test('get, list with filters and paging', async () => {
    const a = (await createUser({ group: 'listgrp', display_name: 'Findme Person' })).body.data;
    const b = (await createUser({ group: 'listgrp', role: 10 })).body.data;
    expect((await gw.api('GET', `/api/user/${a.id}`)).body.data.username).toBe(a.username);
    expect((await gw.api('GET', '/api/user/999999')).status).toBe(404);
    const grp = await gw.api('GET', '/api/user/?group=listgrp');
    expect(grp.body.data.items.map((u: any) => u.id).sort()).toEqual([a.id, b.id].sort());
    expect((await gw.api('GET', '/api/user/?group=listgrp&role=10')).body.data.items.map((u: any) => u.id)).toEqual([b.id]);
    expect((await gw.api('GET', '/api/user/?keyword=findme')).body.data.items.map((u: any) => u.id)).toEqual([a.id]);
    const page = await gw.api('GET', '/api/user/?p=1&page_size=1');
    expect(page.body.data).toMatchObject({ page: 1, page_size: 1 });
    expect(page.body.data.items).toHaveLength(1);
    expect(page.body.data.total).toBeGreaterThanOrEqual(3);
  });

  test('PUT is partial; quota is refused with a pointer to the ledger; a password change ends sessions', async () => {
    const u = (await createUser({ display_name: 'Before' })).body.data;
    const r = await gw.api('PUT', '/api/user/', { id: u.id, display_name: 'After', group: 'g2' });
    expect(r.body.data).toMatchObject({ display_name: 'After', group: 'g2', username: u.username, role: 1 });
    const q = await gw.api('PUT', '/api/user/', { id: u.id, quota: 100 });
    expect(q.status).toBe(400);
    expect(q.body.error).toMatchObject({ param: 'quota', code: 'quota_not_editable' });
    expect(q.body.error.message).toContain('/api/ledger/adjust');
    const s = await login(u.username, 'password-123');
    const cookie = s.headers.get('set-cookie')!.split(';')[0]!;
    expect((await gw.api('PUT', '/api/user/', { id: u.id, password: 'new-password-456' })).status).toBe(200);
    expect((await fetch(`${gw.url}/api/user/self`, { headers: { cookie } })).status).toBe(401);
    expect((await login(u.username, 'password-123')).status).toBe(401);
    expect((await login(u.username, 'new-password-456')).status).toBe(200);
    expect((await gw.api('PUT', '/api/user/', { id: 999999, display_name: 'x' })).status).toBe(404);
  });

  test('disable ends sessions and stops keys at once; enable restores the keys', async () => {
    const u = await makeUser(gw);
    const key = (await gw.api('POST', '/api/token/', { name: 'k' }, u.token)).body.data.key as string;
    expect(gw.services.apiKeys.lookup(key)?.userId).toBe(u.id);
    const s = await login(u.username, u.password);
    const cookie = s.headers.get('set-cookie')!.split(';')[0]!;
    const d = await gw.api('POST', `/api/user/${u.id}/disable`);
    expect(d.body.data.status).toBe(2);
    expect(gw.services.apiKeys.lookup(key)).toBeUndefined();
    expect(gw.services.userDirectory.get(u.id)?.status).toBe(2);
    expect((await fetch(`${gw.url}/api/user/self`, { headers: { cookie } })).status).toBe(401);
    expect((await gw.api('GET', '/api/user/self', undefined, u.token)).status).toBe(401);
    // Answered like a wrong password: a right password on a disabled account must not be confirmed.
    const refused = await login(u.username, u.password);
    expect(refused.status).toBe(401);
    expect(refused.body.error.code).toBe('invalid_credentials');
    const e = await gw.api('POST', `/api/user/${u.id}/enable`);
    expect(e.body.data.status).toBe(1);
    expect(gw.services.apiKeys.lookup(key)?.userId).toBe(u.id);
    // Disabling through PUT status does the same.
    await gw.api('PUT', '/api/user/', { id: u.id, status: 2 });
    expect(gw.services.apiKeys.lookup(key)).toBeUndefined();
  });

  test('delete removes the user, its keys and sessions; root cannot be deleted', async () => {
    const u = await makeUser(gw);
    const key = (await gw.api('POST', '/api/token/', { name: 'k' }, u.token)).body.data.key as string;
    expect((await gw.api('DELETE', `/api/user/${u.id}`)).status).toBe(200);
    expect((await gw.api('GET', `/api/user/${u.id}`)).status).toBe(404);
    expect(gw.services.apiKeys.lookup(key)).toBeUndefined();
    expect(gw.services.userDirectory.get(u.id)).toBeUndefined();
    expect((await gw.api('DELETE', `/api/user/${u.id}`)).status).toBe(404);
    const root = (await gw.services.users.byUsername('root'))!;
    const r = await gw.api('DELETE', `/api/user/${root.id}`);
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('cannot_delete_root');
  });

  test('PUT /api/user/self changes own display name and e-mail only', async () => {
    const u = await makeUser(gw);
    const r = await gw.api('PUT', '/api/user/self', { display_name: 'Me Myself', email: 'me@example.com', current_password: u.password, role: 100, group: 'vip' }, u.token);
    expect(r.status).toBe(200);
    expect(r.body.data).toMatchObject({ display_name: 'Me Myself', email: 'me@example.com', role: 1, group: 'default' });
    expect((await gw.api('PUT', '/api/user/self', { email: 'not-an-email' }, u.token)).body.error.param).toBe('email');
    // Same address again needs no password; a new one does (it receives password resets).
    expect((await gw.api('PUT', '/api/user/self', { email: 'me@example.com', display_name: 'Me' }, u.token)).status).toBe(200);
    const noPw = await gw.api('PUT', '/api/user/self', { email: 'other@example.com' }, u.token);
    expect(noPw.status).toBe(400);
    expect(noPw.body.error.param).toBe('current_password');
    const badPw = await gw.api('PUT', '/api/user/self', { email: 'other@example.com', current_password: 'wrong-password' }, u.token);
    expect(badPw.status).toBe(403);
    expect((await gw.api('GET', '/api/user/self', undefined, u.token)).body.data.email).toBe('me@example.com');
    expect((await gw.api('PUT', '/api/user/self', { email: '', current_password: u.password }, u.token)).body.data.email).toBeNull();
  });

  test('PUT /api/user/self tells whether an address is registered only after the current password', async () => {
    const other = await makeUser(gw, 1, { email: `taken-${crypto.randomUUID().slice(0, 8)}@example.com` });
    const taken = (await gw.services.users.byId(other.id))!.email!;
    const u = await makeUser(gw);
    // Without the password (or with a wrong one) a taken and a free address get the same answer.
    for (const [body, status, code] of [
      [{}, 400, 'missing_field'],
      [{ current_password: 'wrong-password' }, 403, 'invalid_password'],
    ] as const) {
      const onTaken = await gw.api('PUT', '/api/user/self', { email: taken, ...body }, u.token);
      const onFree = await gw.api('PUT', '/api/user/self', { email: `free-${crypto.randomUUID().slice(0, 8)}@example.com`, ...body }, u.token);
      expect([onTaken.status, onTaken.body.error.code]).toEqual([status, code]);
      expect([onFree.status, onFree.body.error.code]).toEqual([status, code]);
    }
    // With it, a taken address is still refused.
    const r = await gw.api('PUT', '/api/user/self', { email: taken, current_password: u.password }, u.token);
    expect([r.status, r.body.error.code]).toEqual([409, 'email_taken']);
    expect((await gw.api('GET', '/api/user/self', undefined, u.token)).body.data.email).toBeNull();
  });
});

describe('role rules', () => {
  test('an admin cannot create, alter, or grant a role >= its own', async () => {
    const admin = await makeUser(gw, 10);
    const other = await makeUser(gw, 10);
    const user = await makeUser(gw, 1);
    expect((await createUser({ role: 10 }, admin.token)).status).toBe(403);
    expect((await createUser({ role: 100 }, admin.token)).body.error).toMatchObject({ code: 'role_too_high', param: 'role' });
    const created = await createUser({ role: 1 }, admin.token);
    expect(created.status).toBe(200);
    expect((await gw.api('PUT', '/api/user/', { id: user.id, role: 10 }, admin.token)).status).toBe(403);
    expect((await gw.api('PUT', '/api/user/', { id: other.id, display_name: 'x' }, admin.token)).status).toBe(403);
    expect((await gw.api('POST', `/api/user/${other.id}/disable`, undefined, admin.token)).status).toBe(403);
    expect((await gw.api('DELETE', `/api/user/${other.id}`, undefined, admin.token)).status).toBe(403);
    const root = (await gw.services.users.byUsername('root'))!;
    expect((await gw.api('PUT', '/api/user/', { id: root.id, display_name: 'x' }, admin.token)).status).toBe(403);
    expect((await gw.api('PUT', '/api/user/', { id: admin.id, group: 'x' }, admin.token)).status).toBe(403);
    // ...but it manages plain users.
    expect((await gw.api('PUT', '/api/user/', { id: user.id, group: 'g3' }, admin.token)).body.data.group).toBe('g3');
    expect((await gw.api('POST', `/api/user/${user.id}/disable`, undefined, admin.token)).status).toBe(200);
    expect((await gw.api('DELETE', `/api/user/${user.id}`, undefined, admin.token)).status).toBe(200);
  });

  test('root can promote to admin and root, but not demote the last root or delete itself', async () => {
    const u = await makeUser(gw);
    expect((await gw.api('PUT', '/api/user/', { id: u.id, role: 10 })).body.data.role).toBe(10);
    const root = (await gw.services.users.byUsername('root'))!;
    const last = await gw.api('PUT', '/api/user/', { id: root.id, role: 10 });
    expect(last.status).toBe(409);
    expect(last.body.error.code).toBe('last_root');
    expect((await gw.api('POST', `/api/user/${root.id}/disable`)).body.error.code).toBe('cannot_disable_self');
    expect((await gw.api('PUT', '/api/user/', { id: u.id, role: 100 })).body.data.role).toBe(100);
    // Now there are two roots: the second can be demoted again.
    expect((await gw.api('PUT', '/api/user/', { id: u.id, role: 1 })).body.data.role).toBe(1);
  });

  test("root's own password and e-mail are not set through PUT /api/user/: that asks no current password", async () => {
    // A stolen root session set a password of its choosing (ending every one of the owner's sessions and tokens) or
    // moved the reset address, which the self routes refuse without the current password.
    const r = await makeUser(gw, 100, { email: 'owner@example.com' });
    const pw = await gw.api('PUT', '/api/user/', { id: r.id, password: 'thiefs-password-1' }, r.token);
    expect({ status: pw.status, code: pw.body.error?.code, param: pw.body.error?.param }).toEqual({ status: 403, code: 'use_self_route', param: 'password' });
    const mail = await gw.api('PUT', '/api/user/', { id: r.id, email: 'thief@example.com' }, r.token);
    expect({ status: mail.status, code: mail.body.error?.code, param: mail.body.error?.param }).toEqual({ status: 403, code: 'use_self_route', param: 'email' });
    // Nothing changed: the owner's token and password still work, the address is the owner's.
    const self = await gw.api('GET', '/api/user/self', undefined, r.token);
    expect({ status: self.status, email: self.body.data?.email }).toEqual({ status: 200, email: 'owner@example.com' });
    expect((await login(r.username, r.password)).status).toBe(200);
    // The rest of one's own row, the same address again, and another root's password stay root's to set.
    expect((await gw.api('PUT', '/api/user/', { id: r.id, display_name: 'me', email: ' owner@example.com' }, r.token)).status).toBe(200);
    const other = await makeUser(gw, 100);
    expect((await gw.api('PUT', '/api/user/', { id: other.id, password: 'set-by-root-123' }, r.token)).status).toBe(200);
    expect((await login(other.username, 'set-by-root-123')).status).toBe(200);
  });

  test("root's own username changes only through PUT /api/user/self with the current password: it is what the owner logs in with", async () => {
    // A stolen root session renamed its own account: the owner's next login (old name, right password) was a 401.
    const r = await makeUser(gw, 100);
    const renamed = `${r.username}x`;
    const direct = await gw.api('PUT', '/api/user/', { id: r.id, username: renamed }, r.token);
    expect({ status: direct.status, code: direct.body.error?.code, param: direct.body.error?.param }).toEqual({ status: 403, code: 'use_self_route', param: 'username' });
    expect((await login(r.username, r.password)).status).toBe(200);
    // The same name again is no change; another root's name stays root's to set.
    expect((await gw.api('PUT', '/api/user/', { id: r.id, username: r.username, display_name: 'me' }, r.token)).status).toBe(200);
    const other = await makeUser(gw, 100);
    expect((await gw.api('PUT', '/api/user/', { id: other.id, username: `${other.username}y` }, r.token)).status).toBe(200);

    const self = (body: Record<string, unknown>, token: string) => gw.api('PUT', '/api/user/self', body, token);
    const bare = await self({ username: renamed }, r.token);
    expect({ status: bare.status, code: bare.body.error?.code, param: bare.body.error?.param }).toEqual({ status: 400, code: 'missing_field', param: 'current_password' });
    expect((await self({ username: renamed, current_password: 'wrong-password-1' }, r.token)).status).toBe(403);
    expect((await login(r.username, r.password)).status).toBe(200);
    const taken = await self({ username: other.username.toUpperCase() + 'Y', current_password: r.password }, r.token);
    expect([taken.status, taken.body.error?.code]).toEqual([409, 'username_taken']);
    const ok = await self({ username: renamed, current_password: r.password }, r.token);
    expect([ok.status, ok.body.data?.username]).toEqual([200, renamed]);
    expect((await login(renamed, r.password)).status).toBe(200);
    // Below root a username is an admin's to set, as before: the self route does not open it.
    const u = await makeUser(gw);
    const mine = await self({ username: `${u.username}z`, current_password: u.password }, u.token);
    expect({ status: mine.status, code: mine.body.error?.code, param: mine.body.error?.param }).toEqual({ status: 403, code: 'username_not_editable', param: 'username' });
    expect((await login(u.username, u.password)).status).toBe(200);
  });
});

describe('bad input', () => {
  test('missing fields, wrong types, out of range, malformed JSON, unknown fields ignored', async () => {
    const cases: Array<[unknown, number, string, string?]> = [
      [{ password: 'password-123' }, 400, 'username', 'missing_field'],
      [{ username: uname() }, 400, 'password', 'missing_field'],
      [{ username: 'a', password: 'password-123' }, 400, 'username'],
      [{ username: 'has space', password: 'password-123' }, 400, 'username'],
      [{ username: uname(), password: 'short' }, 400, 'password'],
      [{ username: uname(), password: 'password-123', role: 5 }, 400, 'role'],
      [{ username: uname(), password: 'password-123', role: '1' }, 400, 'role'],
      [{ username: uname(), password: 'password-123', quota: '5' }, 400, 'quota', 'invalid_type'],
      [{ username: uname(), password: 'password-123', quota: -1 }, 400, 'quota', 'out_of_range'],
      [{ username: uname(), password: 'password-123', quota: 1.5 }, 400, 'quota'],
      [{ username: uname(), password: 'password-123', email: 'nope' }, 400, 'email'],
      [{ username: uname(), password: 'password-123', group: 'bad group' }, 400, 'group'],
      [{ username: 123, password: 'password-123' }, 400, 'username'],
    ];
    for (const [body, status, param, code] of cases) {
      const r = await gw.api('POST', '/api/user/', body);
      expect({ body, status: r.status, param: r.body.error?.param }).toEqual({ body, status, param });
      if (code) expect(r.body.error.code).toBe(code);
    }
    const bad = await gw.api('POST', '/api/user/', '{"username": ');
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('invalid_json');
    const extra = await gw.api('POST', '/api/user/', { username: uname(), password: 'password-123', favourite_colour: 'blue' });
    expect(extra.status).toBe(200);
    expect(extra.body.data).not.toHaveProperty('favourite_colour');
    expect((await gw.api('PUT', '/api/user/', { display_name: 'x' })).body.error).toMatchObject({ code: 'missing_field', param: 'id' });
    expect((await gw.api('PUT', '/api/user/', { id: '5', display_name: 'x' })).body.error.param).toBe('id');
    expect((await gw.api('POST', '/api/user/999999/enable')).status).toBe(404);
  });
});
