import { describe, expect, test } from 'bun:test';
import type { MakeEnv } from './env';
import { BIG, seedKey, seedUser, useEnv } from './setup';
import { SESSION_ID_CHARS } from '../repos/sessions';

/** Users, login sessions and access tokens, relay API keys, account security. */
export function identityContract(make: MakeEnv): void {
  describe('users', () => {
    const env = useEnv(make);

    test('insert applies defaults; booleans are booleans; 1e15 quotas round-trip exactly', async () => {
      const { users } = env().repos;
      const u = await users.insert({ username: 'alice', passwordHash: 'h', quota: BIG, usedQuota: BIG - 1, createdAt: 1_700_000_000_123, updatedAt: 2 });
      expect(u).toMatchObject({ username: 'alice', role: 1, status: 1, group: 'default', displayName: '', email: null, totpEnabled: false, quota: BIG, usedQuota: BIG - 1, requestCount: 0, createdAt: 1_700_000_000_123 });
      expect(typeof u.id).toBe('number');
      expect(await users.byId(u.id)).toEqual(u);
      expect(await users.byUsername('alice')).toEqual(u);
      expect(await users.byId(u.id + 1000)).toBeUndefined();
      expect(await users.byUsername('ALICE')).toBeUndefined();
    });

    test('a taken username (or email) is refused by the unique index', async () => {
      const { users } = env().repos;
      await users.insert({ username: 'bob', passwordHash: 'h', email: 'b@x.io', createdAt: 1, updatedAt: 1 });
      await expect((async () => users.insert({ username: 'bob', passwordHash: 'h', createdAt: 1, updatedAt: 1 }))()).rejects.toThrow();
      await expect((async () => users.insert({ username: 'bob2', passwordHash: 'h', email: 'b@x.io', createdAt: 1, updatedAt: 1 }))()).rejects.toThrow();
      expect(await users.count()).toBe(1);
    });

    test('insertIfAbsent: a taken username writes nothing and answers undefined; concurrent calls create one row', async () => {
      const { users } = env().repos;
      const first = await users.insertIfAbsent({ username: 'root', passwordHash: 'h1', role: 100, createdAt: 1, updatedAt: 1 });
      expect(first).toMatchObject({ username: 'root', passwordHash: 'h1', role: 100 });
      expect(await users.insertIfAbsent({ username: 'root', passwordHash: 'h2', createdAt: 2, updatedAt: 2 })).toBeUndefined();
      expect(await users.byUsername('root')).toEqual(first!);
      const raced = await Promise.all(Array.from({ length: 5 }, (_, i) => users.insertIfAbsent({ username: 'dave', passwordHash: `h${i}`, createdAt: 1, updatedAt: 1 })));
      expect(raced.filter((r) => r !== undefined)).toHaveLength(1);
      // Another unique column still refuses: only the username conflict is tolerated.
      await users.update(first!.id, { email: 'r@x.io' });
      await expect((async () => users.insertIfAbsent({ username: 'eve', passwordHash: 'h', email: 'r@x.io', createdAt: 1, updatedAt: 1 }))()).rejects.toThrow();
      expect(await users.count()).toBe(2);
    });

    test('byEmail ignores ASCII case only (SQLite lower() semantics)', async () => {
      const { users } = env().repos;
      const u = await users.insert({ username: 'c', passwordHash: 'h', email: 'Carol@Example.COM', createdAt: 1, updatedAt: 1 });
      const e = await users.insert({ username: 'e', passwordHash: 'h', email: 'Élise@x.io', createdAt: 1, updatedAt: 1 });
      expect((await users.byEmail('carol@example.com'))?.id).toBe(u.id);
      expect((await users.byEmail('CAROL@EXAMPLE.com'))?.id).toBe(u.id);
      expect((await users.byEmail('Élise@X.IO'))?.id).toBe(e.id);
      expect(await users.byEmail('élise@x.io')).toBeUndefined();
      expect(await users.byEmail('nobody@x.io')).toBeUndefined();
    });

    test('update returns the new row, undefined for a missing id; delete says whether a row went', async () => {
      const { users } = env().repos;
      const u = await seedUser(env().repos);
      const up = await users.update(u.id, { displayName: 'Dee', status: 2, quota: BIG, updatedAt: 9 });
      expect(up).toMatchObject({ id: u.id, displayName: 'Dee', status: 2, quota: BIG, updatedAt: 9 });
      expect(await users.update(u.id + 99, { displayName: 'x' })).toBeUndefined();
      // Conditional on the password hash: written only while it is still the one given.
      expect(await users.update(u.id, { displayName: 'Old' }, `${u.passwordHash}-other`)).toBeUndefined();
      expect((await users.byId(u.id))!.displayName).toBe('Dee');
      expect(await users.update(u.id, { passwordHash: 'h2' }, u.passwordHash)).toMatchObject({ id: u.id, passwordHash: 'h2' });
      expect(await users.update(u.id, { passwordHash: 'h3' }, u.passwordHash)).toBeUndefined();
      expect(await users.delete(u.id)).toBe(true);
      expect(await users.delete(u.id)).toBe(false);
      expect(await users.count()).toBe(0);
    });

    test('an admin\'s write (actorId) lands only while the actor, as the write reads it, still manages the target', async () => {
      const { users } = env().repos;
      const r = env().repos;
      const admin = await seedUser(r, { role: 10 });
      const root = await seedUser(r, { role: 100 });
      const mk = () => seedUser(r, { role: 1 });
      // The actor's role as the caller checked it allowed these; each write reads it again.
      const [a, b, c] = [await mk(), await mk(), await mk()];
      expect(await users.update(a.id, { displayName: 'by-admin' }, undefined, admin.id)).toMatchObject({ displayName: 'by-admin' });
      // Root manages anyone, a peer root too; an admin not its peers.
      const peer = await seedUser(r, { role: 100 });
      expect(await users.update(peer.id, { displayName: 'by-root' }, undefined, root.id)).toMatchObject({ displayName: 'by-root' });
      expect(await users.update(root.id, { displayName: 'by-admin' }, undefined, admin.id)).toBeUndefined();
      // The admin is demoted between its check and its writes: none lands.
      await users.update(admin.id, { role: 1 });
      expect(await users.update(a.id, { displayName: 'late' }, undefined, admin.id)).toBeUndefined();
      expect(await users.updateKeepingRoot(b.id, { status: 2 }, undefined, admin.id)).toBeUndefined();
      expect(await users.delete(c.id, admin.id)).toBe(false);
      expect([(await users.byId(a.id))!.displayName, (await users.byId(b.id))!.status, !!(await users.byId(c.id))]).toEqual(['by-admin', 1, true]);
      // A root demoted to admin no longer reaches admins, and no longer a root.
      await users.update(root.id, { role: 10 });
      const otherAdmin = await seedUser(r, { role: 10 });
      expect(await users.update(otherAdmin.id, { displayName: 'late' }, undefined, root.id)).toBeUndefined();
      expect(await users.updateKeepingRoot(peer.id, { role: 1 }, undefined, root.id)).toBeUndefined();
      expect(await users.delete(otherAdmin.id, root.id)).toBe(false);
      // Still above plain users: those writes land.
      expect(await users.updateKeepingRoot(b.id, { status: 2 }, undefined, root.id)).toMatchObject({ status: 2 });
      expect(await users.delete(c.id, root.id)).toBe(true);
      // An actor deleted meanwhile acts on nobody.
      await users.delete(root.id);
      expect(await users.update(a.id, { displayName: 'ghost' }, undefined, root.id)).toBeUndefined();
      expect(await users.updateKeepingRoot(a.id, { status: 2 }, undefined, root.id)).toBeUndefined();
      expect(await users.delete(a.id, root.id)).toBe(false);
      expect(await users.byId(a.id)).toMatchObject({ displayName: 'by-admin', status: 1 });
    });

    test('list: keyword is a LIKE over username, display name and email (ASCII case-folded, % and _ wild, no escape)', async () => {
      const { users } = env().repos;
      const mk = (username: string, displayName = '', email: string | null = null) =>
        users.insert({ username, passwordHash: 'h', displayName, email, createdAt: 1, updatedAt: 1 });
      const a = await mk('Alpha', 'first');
      const b = await mk('beta', 'The ALPHAbet');
      const c = await mk('gamma', '', 'al.pha@x.io');
      const d = await mk('back\\slash', '100%_sure');
      const e = await mk('Ärger', 'ÄRGER');
      const ids = async (keyword: string) => (await users.list({ keyword, offset: 0, limit: 50 })).items.map((u) => u.id);
      expect(await ids('alpha')).toEqual([b.id, a.id]);
      expect(await ids('AL_PHA')).toEqual([c.id]);
      expect(await ids('a%a')).toEqual([d.id, c.id, b.id, a.id]);
      expect(await ids('k\\s')).toEqual([d.id]);
      expect(await ids('0%_s')).toEqual([d.id]);
      expect(await ids('ärger')).toEqual([]);
      expect(await ids('Ärger')).toEqual([e.id]);
      expect(await ids('zzz')).toEqual([]);
    });

    test('list: role, status and group filters, newest first, offset/limit with the total of all matches', async () => {
      const { users } = env().repos;
      const made = [];
      for (let i = 0; i < 7; i++) {
        made.push(await users.insert({ username: `p${i}`, passwordHash: 'h', role: i % 2 ? 10 : 1, status: i < 5 ? 1 : 2, group: i % 3 ? 'default' : 'vip', createdAt: 1, updatedAt: 1 }));
      }
      const all = await users.list({ offset: 0, limit: 3 });
      expect(all.total).toBe(7);
      expect(all.items.map((u) => u.username)).toEqual(['p6', 'p5', 'p4']);
      const page = await users.list({ offset: 3, limit: 3 });
      expect(page.items.map((u) => u.username)).toEqual(['p3', 'p2', 'p1']);
      expect((await users.list({ offset: 6, limit: 3 })).items.map((u) => u.username)).toEqual(['p0']);
      expect((await users.list({ offset: 10, limit: 3 })).items).toEqual([]);
      const admins = await users.list({ role: 10, offset: 0, limit: 10 });
      expect(admins.items.map((u) => u.username)).toEqual(['p5', 'p3', 'p1']);
      const combo = await users.list({ role: 1, status: 1, group: 'vip', offset: 0, limit: 10 });
      expect(combo).toEqual({ items: [made[0]!], total: 1 });
      expect((await users.list({ status: 2, offset: 0, limit: 1 })).total).toBe(2);
    });
  });

  describe('sessions and access tokens', () => {
    const env = useEnv(make);

    test('a session is found until it expires, then purged; deleting by user counts', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const v = await seedUser(r);
      await r.sessions.createSession({ idHash: 's1', userId: u.id, createdAt: 1, expiresAt: 100, ip: '1.2.3.4' });
      await r.sessions.createSession({ idHash: 's2', userId: u.id, createdAt: 1, expiresAt: 200 });
      await r.sessions.createSession({ idHash: 's3', userId: v.id, createdAt: 1, expiresAt: 50 });
      expect(await r.sessions.findSession('s1', 99)).toEqual({ idHash: 's1', userId: u.id, createdAt: 1, expiresAt: 100, ip: '1.2.3.4', userAgent: '' });
      expect(await r.sessions.findSession('s1', 100)).toBeUndefined();
      expect(await r.sessions.findSession('nope', 0)).toBeUndefined();
      await expect((async () => r.sessions.createSession({ idHash: 's1', userId: u.id, createdAt: 1, expiresAt: 1 }))()).rejects.toThrow();
      await r.sessions.purgeExpired(50); // strictly before: s3 (expires at 50) stays
      expect(await r.sessions.findSession('s3', 49)).toBeDefined();
      await r.sessions.purgeExpired(51);
      expect(await r.sessions.findSession('s3', 0)).toBeUndefined();
      await r.sessions.deleteSession('s1');
      expect(await r.sessions.findSession('s1', 0)).toBeUndefined();
      expect(await r.sessions.deleteUserSessions(u.id)).toBe(1);
      expect(await r.sessions.deleteUserSessions(u.id)).toBe(0);
    });

    test('sessions: list a user\'s live ones newest first; end one by its id prefix, only its owner\'s', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const v = await seedUser(r);
      const hash = (c: string) => c.repeat(64);
      await r.sessions.createSession({ idHash: hash('a'), userId: u.id, createdAt: 10, expiresAt: 100, ip: '1.1.1.1', userAgent: 'A' });
      await r.sessions.createSession({ idHash: hash('b'), userId: u.id, createdAt: 20, expiresAt: 100 });
      await r.sessions.createSession({ idHash: hash('c'), userId: u.id, createdAt: 30, expiresAt: 40 }); // expired at 50
      await r.sessions.createSession({ idHash: hash('d'), userId: v.id, createdAt: 40, expiresAt: 100 });
      expect((await r.sessions.listSessions(u.id, 50)).map((s) => s.idHash)).toEqual([hash('b'), hash('a')]);
      expect((await r.sessions.listSessions(u.id, 50))[1]).toEqual({ idHash: hash('a'), userId: u.id, createdAt: 10, expiresAt: 100, ip: '1.1.1.1', userAgent: 'A' });
      // Another user's session is not theirs to end; the prefix is compared exactly (no pattern matching).
      expect(await r.sessions.deleteUserSession(u.id, 'd'.repeat(SESSION_ID_CHARS))).toBe(false);
      expect(await r.sessions.deleteUserSession(u.id, '%')).toBe(false);
      expect(await r.sessions.deleteUserSession(u.id, 'a'.repeat(SESSION_ID_CHARS))).toBe(true);
      expect(await r.sessions.deleteUserSession(u.id, 'a'.repeat(SESSION_ID_CHARS))).toBe(false);
      expect((await r.sessions.listSessions(u.id, 50)).map((s) => s.idHash)).toEqual([hash('b')]);
      expect(await r.sessions.findSession(hash('d'), 50)).toBeDefined();
    });

    test('tokens: create, find by hash, list per user, touch, revoke only by their owner', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const v = await seedUser(r);
      const t = await r.sessions.createToken({ userId: u.id, name: 'ci', tokenHash: 'th1', prefix: 'gwt_ab', createdAt: 5 });
      expect(t).toMatchObject({ userId: u.id, name: 'ci', tokenHash: 'th1', expiresAt: null, lastUsedAt: null, revokedAt: null });
      await r.sessions.createToken({ userId: v.id, tokenHash: 'th2', prefix: 'p', createdAt: 5 });
      expect(await r.sessions.findToken('th1')).toEqual(t);
      expect(await r.sessions.findToken('zz')).toBeUndefined();
      expect((await r.sessions.listTokens(u.id)).map((x) => x.id)).toEqual([t.id]);
      await r.sessions.touchToken(t.id, BIG);
      expect((await r.sessions.findToken('th1'))!.lastUsedAt).toBe(BIG);
      expect(await r.sessions.revokeToken(v.id, t.id, 7)).toBe(false);
      expect(await r.sessions.revokeToken(u.id, t.id, 7)).toBe(true);
      expect((await r.sessions.findToken('th1'))!.revokedAt).toBe(7);
    });

    test('revokeTokens: the owner\'s live ones only, ended ones left as they ended, nothing at all when one id was never the owner\'s', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const v = await seedUser(r);
      const mk = (userId: number, h: string, extra: { expiresAt?: number } = {}) =>
        r.sessions.createToken({ userId, tokenHash: h, prefix: 'p', createdAt: 1, ...extra });
      const [live, expired, revoked, theirs] = [await mk(u.id, 'r1'), await mk(u.id, 'r2', { expiresAt: 50 }), await mk(u.id, 'r3'), await mk(v.id, 'r4')];
      await r.sessions.revokeToken(u.id, revoked.id, 20);
      const revokedAt = async () => Promise.all(['r1', 'r2', 'r3', 'r4'].map(async (h) => (await r.sessions.findToken(h))!.revokedAt));

      const all = [live.id, expired.id, revoked.id];
      expect(await r.sessions.revokeTokens(u.id, [...all, theirs.id], 100)).toEqual({ notYours: theirs.id });
      expect(await r.sessions.revokeTokens(u.id, [theirs.id + 1000, ...all], 100)).toEqual({ notYours: theirs.id + 1000 });
      expect(await revokedAt()).toEqual([null, null, 20, null]);
      expect(await r.sessions.revokeTokens(u.id, all, 100)).toEqual({ revoked: 1 });
      expect(await revokedAt()).toEqual([100, null, 20, null]);
      expect(await r.sessions.revokeTokens(u.id, all, 200)).toEqual({ revoked: 0 });
      expect(await revokedAt()).toEqual([100, null, 20, null]);
    });

    test('revokeToken: a token already revoked keeps when it ended (a second revoke still finds it)', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const t = await r.sessions.createToken({ userId: u.id, tokenHash: 'rk1', prefix: 'p', createdAt: 1 });
      expect(await r.sessions.revokeToken(u.id, t.id, 20)).toBe(true);
      expect(await r.sessions.revokeToken(u.id, t.id, 90)).toBe(true);
      expect((await r.sessions.findToken('rk1'))!.revokedAt).toBe(20);
    });

    test('deleting a user cascades to its sessions, tokens and keys', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      await r.sessions.createSession({ idHash: 'c1', userId: u.id, createdAt: 1, expiresAt: 100 });
      await r.sessions.createToken({ userId: u.id, tokenHash: 'ct', prefix: 'p', createdAt: 1 });
      const k = await seedKey(r, u.id);
      await r.users.delete(u.id);
      expect(await r.sessions.findSession('c1', 0)).toBeUndefined();
      expect(await r.sessions.findToken('ct')).toBeUndefined();
      expect(await r.apiKeys.byId(k.id)).toBeUndefined();
    });
  });

  describe('api keys', () => {
    const env = useEnv(make);

    test('defaults, JSON lists (null is not []), booleans and big budgets round-trip', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const k = await r.apiKeys.insert({ userId: u.id, keyHash: 'a', prefix: 'sk-a', createdAt: 1, updatedAt: 1 });
      expect(k).toMatchObject({ status: 1, unlimitedQuota: true, remainQuota: 0, usedQuota: 0, models: null, allowIps: null, group: null, expiresAt: null, lastUsedAt: null });
      const l = await r.apiKeys.insert({ userId: u.id, keyHash: 'b', prefix: 'sk-b', unlimitedQuota: false, remainQuota: BIG, models: [], allowIps: ['10.0.0.0/8', '::1'], group: 'vip', createdAt: 1, updatedAt: 1 });
      expect(await r.apiKeys.byId(l.id)).toMatchObject({ unlimitedQuota: false, remainQuota: BIG, models: [], allowIps: ['10.0.0.0/8', '::1'], group: 'vip' });
      const up = await r.apiKeys.update(l.id, { models: ['m-1', 'm"2'], unlimitedQuota: true, status: 2 });
      expect(up).toMatchObject({ models: ['m-1', 'm"2'], unlimitedQuota: true, status: 2 });
      expect(await r.apiKeys.update(l.id + 100, { status: 2 })).toBeUndefined();
      await expect((async () => r.apiKeys.insert({ userId: u.id, keyHash: 'a', prefix: 'x', createdAt: 1, updatedAt: 1 }))()).rejects.toThrow();
    });

    test('updateReplacing returns the row as the write found it and as it left it; successive writes chain', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const k = await seedKey(r, u.id, { allowIps: ['10.0.0.0/8'], remainQuota: 5 });
      const one = await r.apiKeys.updateReplacing(k.id, { allowIps: ['10.1.0.0/16'] });
      expect(one!.before).toMatchObject({ id: k.id, allowIps: ['10.0.0.0/8'], remainQuota: 5 });
      expect(one!.after).toMatchObject({ id: k.id, allowIps: ['10.1.0.0/16'], remainQuota: 5 });
      const [two, three] = await Promise.all([
        r.apiKeys.updateReplacing(k.id, { allowIps: ['10.2.0.0/16'] }),
        r.apiKeys.updateReplacing(k.id, { allowIps: ['10.3.0.0/16'] }),
      ]);
      // Whichever went first, the other replaced what it wrote: no write's value is lost unseen.
      const befores = [two!.before.allowIps![0], three!.before.allowIps![0]].sort();
      expect([['10.1.0.0/16', '10.2.0.0/16'], ['10.1.0.0/16', '10.3.0.0/16']]).toContainEqual(befores);
      expect(await r.apiKeys.updateReplacing(k.id + 100, { status: 2 })).toBeUndefined();
    });

    test('all, byUser, delete', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const v = await seedUser(r);
      const k1 = await seedKey(r, u.id);
      const k2 = await seedKey(r, v.id);
      expect((await r.apiKeys.all()).map((k) => k.id).sort()).toEqual([k1.id, k2.id].sort());
      expect((await r.apiKeys.byUser(v.id)).map((k) => k.id)).toEqual([k2.id]);
      expect(await r.apiKeys.delete(k1.id)).toBe(true);
      expect(await r.apiKeys.delete(k1.id)).toBe(false);
      expect(await r.apiKeys.byUser(u.id)).toEqual([]);
    });

    test('list: one user, keyword is a plain substring (ASCII case-folded, % is literal), status, paging', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const v = await seedUser(r);
      const names = ['Prod key', 'staging', 'PRODUCTION 100%', 'dev', 'Ärger'];
      const keys = [];
      for (const [i, name] of names.entries()) keys.push(await seedKey(r, u.id, { name, status: i === 3 ? 2 : 1 }));
      await seedKey(r, v.id, { name: 'prod of v' });
      const names_ = async (f: { keyword?: string; status?: number; offset?: number; limit?: number }) =>
        (await r.apiKeys.list({ userId: u.id, offset: 0, limit: 10, ...f })).items.map((k) => k.name);
      expect(await names_({ keyword: 'prod' })).toEqual(['PRODUCTION 100%', 'Prod key']);
      expect(await names_({ keyword: '0%' })).toEqual(['PRODUCTION 100%']);
      expect(await names_({ keyword: 'p%d' })).toEqual([]);
      expect(await names_({ keyword: 'p_od' })).toEqual([]);
      expect(await names_({ keyword: 'ärger' })).toEqual([]);
      expect(await names_({ keyword: 'Ärg' })).toEqual(['Ärger']);
      expect(await names_({ status: 2 })).toEqual(['dev']);
      const page = await r.apiKeys.list({ userId: u.id, offset: 1, limit: 2 });
      expect(page.total).toBe(5);
      expect(page.items.map((k) => k.id)).toEqual([keys[3]!.id, keys[2]!.id]);
    });
  });

  describe('security', () => {
    const env = useEnv(make);

    test('TOTP: pending secret, enable once with a later step, steps only move forward, disable forgets', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      expect(await r.security.setPendingTotp(u.id, 'sealed-1', 10)).toBe(true);
      expect((await r.users.byId(u.id))!.totpSecret).toBe('sealed-1');
      expect(await r.security.enableTotp(u.id, 0, ['c1', 'c2'], 11, 'sealed-1', 'h')).toBe(false); // step 0 is not after the last (0)
      expect(await r.security.unusedBackupCodes(u.id)).toBe(0);
      // Only with the pending secret the code was checked against: a secret replaced since is not turned on.
      expect(await r.security.enableTotp(u.id, 5, ['c1', 'c2', 'c3'], 11, 'sealed-0', 'h')).toBe(false);
      // Nor after the password the caller's current password was checked against was replaced.
      expect(await r.security.enableTotp(u.id, 5, ['c1', 'c2', 'c3'], 11, 'sealed-1', 'h-before')).toBe(false);
      // The user's other sessions end in the same write, the caller's kept; another user's stay.
      const v = await seedUser(r);
      for (const h of ['e1', 'e2']) await r.sessions.createSession({ idHash: h, userId: u.id, createdAt: 1, expiresAt: 100 });
      await r.sessions.createSession({ idHash: 'ev', userId: v.id, createdAt: 1, expiresAt: 100 });
      expect(await r.security.enableTotp(u.id, 5, ['c1', 'c2', 'c3'], 11, 'sealed-1', 'h', 'e2')).toEqual({ sessionsEnded: 1 });
      expect([await r.sessions.findSession('e1', 0), await r.sessions.findSession('e2', 0), await r.sessions.findSession('ev', 0)].map(Boolean)).toEqual([false, true, true]);
      expect((await r.users.byId(u.id))!).toMatchObject({ totpEnabled: true, totpLastStep: 5 });
      expect(await r.security.unusedBackupCodes(u.id)).toBe(3);
      expect(await r.security.enableTotp(u.id, 6, [], 12, 'sealed-1', 'h')).toBe(false);
      expect(await r.security.setPendingTotp(u.id, 'sealed-2', 12)).toBe(false);
      expect(await r.security.claimTotpStep(u.id, 5)).toBe(false);
      expect(await r.security.claimTotpStep(u.id, 6)).toBe(true);
      expect(await r.security.claimTotpStep(u.id, 6)).toBe(false);
      expect(await r.security.claimTotpStep(u.id + 50, 99)).toBe(false);
      await r.security.disableTotp(u.id, 13);
      expect((await r.users.byId(u.id))!).toMatchObject({ totpEnabled: false, totpSecret: null, totpLastStep: 6 });
      expect(await r.security.unusedBackupCodes(u.id)).toBe(0);
    });

    test('an admin\'s 2FA reset (actorId) lands only while the target is below the actor\'s role as the write reads it', async () => {
      const r = env().repos;
      const admin = await seedUser(r, { role: 10 });
      const root = await seedUser(r, { role: 100 });
      const withTotp = async (role: number) => {
        const u = await seedUser(r, { role });
        await r.security.setPendingTotp(u.id, 'sealed', 1);
        expect(await r.security.enableTotp(u.id, 1, ['c1'], 2, 'sealed', 'h')).toEqual({ sessionsEnded: 0 });
        return u;
      };
      const on = async (id: number) => (await r.users.byId(id))!.totpEnabled;
      const [a, b, peer] = [await withTotp(1), await withTotp(1), await withTotp(100)];
      expect(await r.security.disableTotp(a.id, 3, admin.id)).toBe(true);
      expect(await on(a.id)).toBe(false);
      // Strictly below: root does not reset a peer root's.
      expect(await r.security.disableTotp(peer.id, 3, root.id)).toBe(false);
      // The admin is demoted between its check and the write: nothing changes.
      await r.users.update(admin.id, { role: 1 });
      expect(await r.security.disableTotp(b.id, 4, admin.id)).toBe(false);
      expect(await on(b.id)).toBe(true);
      expect(await r.security.unusedBackupCodes(b.id)).toBe(1);
      // An actor deleted meanwhile resets nothing.
      await r.users.delete(root.id);
      expect(await r.security.disableTotp(b.id, 5, root.id)).toBe(false);
      expect(await on(b.id)).toBe(true);
    });

    test('backup codes are used once; replacing voids the old set', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const v = await seedUser(r);
      await r.security.replaceBackupCodes(u.id, ['a', 'b'], 1);
      await r.security.replaceBackupCodes(v.id, ['a'], 1);
      expect(await r.security.consumeBackupCode(u.id, 'a', 2)).toBe(true);
      expect(await r.security.consumeBackupCode(u.id, 'a', 3)).toBe(false);
      expect(await r.security.consumeBackupCode(u.id, 'zz', 3)).toBe(false);
      expect(await r.security.unusedBackupCodes(u.id)).toBe(1);
      expect(await r.security.unusedBackupCodes(v.id)).toBe(1);
      await r.security.replaceBackupCodes(u.id, ['c', 'd', 'e'], 4);
      expect(await r.security.consumeBackupCode(u.id, 'b', 5)).toBe(false);
      expect(await r.security.unusedBackupCodes(u.id)).toBe(3);
      await r.security.replaceBackupCodes(u.id, [], 6);
      expect(await r.security.unusedBackupCodes(u.id)).toBe(0);
      // Conditional on the password hash the caller's password was checked against (seedUser's is 'h').
      expect(await r.security.replaceBackupCodes(u.id, ['f'], 7, 'h-before')).toBe(false);
      expect(await r.security.unusedBackupCodes(u.id)).toBe(0);
      for (const h of ['b1', 'b2']) await r.sessions.createSession({ idHash: h, userId: u.id, createdAt: 1, expiresAt: 100 });
      expect(await r.security.replaceBackupCodes(u.id, ['f'], 7, 'h')).toEqual({ sessionsEnded: 0 });
      expect(await r.security.replaceBackupCodes(u.id, ['f'], 7, 'h', { keep: 'b1' })).toEqual({ sessionsEnded: 1 });
      expect([await r.sessions.findSession('b1', 0), await r.sessions.findSession('b2', 0)].map(Boolean)).toEqual([true, false]);
      expect(await r.security.unusedBackupCodes(u.id)).toBe(1);
    });

    test('reset tokens: a new one voids the old; valid until expiry; consumed once, clearing the lockout', async () => {
      const r = env().repos;
      const u = await seedUser(r, { failedLogins: 3, lockCount: 2, lockedUntil: 999, email: `${crypto.randomUUID()}@x.test` });
      const basis = { passwordHash: u.passwordHash, email: u.email! };
      await r.security.createResetToken(u.id, 't1', 100, 1, basis);
      await r.security.createResetToken(u.id, 't2', 100, 2, basis);
      expect(await r.security.resetTokenValid(u.id, 't1', 50)).toBe(false);
      expect(await r.security.resetTokenValid(u.id, 't2', 99)).toBe(true);
      expect(await r.security.resetTokenValid(u.id, 't2', 100)).toBe(false);
      expect(await r.security.resetTokenValid(u.id + 1, 't2', 50)).toBe(false);
      expect(await r.security.resetPassword(u.id, 't2', 'new-hash', 100)).toBe(false); // expired
      expect(await r.security.resetPassword(u.id, 't2', 'new-hash', 60)).toBe(true);
      expect(await r.security.resetPassword(u.id, 't2', 'other', 61)).toBe(false);
      expect(await r.users.byId(u.id)).toMatchObject({ passwordHash: 'new-hash', failedLogins: 0, lockCount: 0, lockedUntil: 0, updatedAt: 60 });
      expect(await r.security.resetTokenValid(u.id, 't2', 62)).toBe(false);
    });

    test('a reset token is written only while the password hash and e-mail are the ones it was decided on', async () => {
      const r = env().repos;
      const email = `${crypto.randomUUID()}@x.test`;
      const u = await seedUser(r, { email });
      const basis = { passwordHash: u.passwordHash, email };
      await r.users.update(u.id, { passwordHash: 'changed' });
      expect(await r.security.createResetToken(u.id, 't1', 100, 1, basis)).toBe(false);
      expect(await r.security.createResetToken(u.id, 't1', 100, 1, { ...basis, passwordHash: 'changed' })).toBe(true);
      await r.users.update(u.id, { email: `moved-${email}` });
      expect(await r.security.createResetToken(u.id, 't2', 100, 2, { ...basis, passwordHash: 'changed' })).toBe(false);
      // The refused writes voided nothing: t1 stands until a write goes through.
      expect(await r.security.resetTokenValid(u.id, 't1', 50)).toBe(true);
    });

    test('reset tokens are written and used only while the user is enabled', async () => {
      const r = env().repos;
      const u = await seedUser(r, { email: `${crypto.randomUUID()}@x.test` });
      const basis = { passwordHash: u.passwordHash, email: u.email! };
      expect(await r.security.createResetToken(u.id, 't1', 100, 1, basis)).toBe(true);
      await r.users.update(u.id, { status: 2 });
      expect(await r.security.createResetToken(u.id, 't2', 100, 2, basis)).toBe(false);
      expect(await r.security.resetTokenValid(u.id, 't2', 50)).toBe(false);
      expect(await r.security.resetPassword(u.id, 't1', 'new-hash', 50)).toBe(false);
      expect((await r.users.byId(u.id))!.passwordHash).not.toBe('new-hash');
      // Not consumed by the refused use.
      expect(await r.security.resetTokenValid(u.id, 't1', 50)).toBe(true);
    });

    test('endCredentials ends every session and live token except the kept one, and counts them', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const v = await seedUser(r);
      for (const h of ['s1', 's2', 's3']) await r.sessions.createSession({ idHash: h, userId: u.id, createdAt: 1, expiresAt: 100 });
      await r.sessions.createSession({ idHash: 'sv', userId: v.id, createdAt: 1, expiresAt: 100 });
      const t1 = await r.sessions.createToken({ userId: u.id, tokenHash: 't1', prefix: 'p', createdAt: 1 });
      const t2 = await r.sessions.createToken({ userId: u.id, tokenHash: 't2', prefix: 'p', createdAt: 1 });
      const t3 = await r.sessions.createToken({ userId: u.id, tokenHash: 't3', prefix: 'p', createdAt: 1 });
      await r.sessions.revokeToken(u.id, t3.id, 5);
      expect(await r.security.endCredentials(u.id, { sessionHash: 's2', tokenId: t1.id }, 9)).toEqual({ sessions_ended: 2, tokens_revoked: 1 });
      expect(await r.sessions.findSession('s2', 0)).toBeDefined();
      expect(await r.sessions.findSession('s1', 0)).toBeUndefined();
      expect(await r.sessions.findSession('sv', 0)).toBeDefined();
      expect((await r.sessions.findToken('t1'))!.revokedAt).toBeNull();
      expect((await r.sessions.findToken('t2'))!.revokedAt).toBe(9);
      expect((await r.sessions.findToken('t3'))!.revokedAt).toBe(5);
      expect(await r.security.endCredentials(u.id, {}, 10)).toEqual({ sessions_ended: 1, tokens_revoked: 1 });
      void t2;
    });

    test('endOtherSessions ends the other sessions of the user only, and leaves access tokens alone', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const v = await seedUser(r);
      for (const h of ['o1', 'o2', 'o3']) await r.sessions.createSession({ idHash: h, userId: u.id, createdAt: 1, expiresAt: 100 });
      await r.sessions.createSession({ idHash: 'ov', userId: v.id, createdAt: 1, expiresAt: 100 });
      await r.sessions.createToken({ userId: u.id, tokenHash: 'ot1', prefix: 'p', createdAt: 1 });
      expect(await r.sessions.endOtherSessions(u.id, 'o2')).toBe(2);
      expect(await r.sessions.findSession('o2', 0)).toBeDefined();
      expect(await r.sessions.findSession('o1', 0)).toBeUndefined();
      expect(await r.sessions.findSession('ov', 0)).toBeDefined();
      expect((await r.sessions.findToken('ot1'))!.revokedAt).toBeNull();
      expect(await r.sessions.endOtherSessions(u.id, undefined)).toBe(1);
    });

    test('login failures lock at the limit for lockSeconds * 2^locks, rounded up to a second', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const policy = { maxFailures: 3, lockSeconds: 60 };
      expect(await r.security.recordLoginFailure(u.id, policy, 1_000_500)).toBe(0);
      expect(await r.security.recordLoginFailure(u.id, policy, 1_000_500)).toBe(0);
      expect(await r.security.recordLoginFailure(u.id, policy, 1_000_500)).toBe(Math.ceil(1_000.5 + 60));
      expect(await r.users.byId(u.id)).toMatchObject({ failedLogins: 0, lockCount: 1 });
      for (let i = 0; i < 2; i++) await r.security.recordLoginFailure(u.id, policy, 2_000_000);
      expect(await r.security.recordLoginFailure(u.id, policy, 2_000_000)).toBe(2_000 + 120);
      expect((await r.users.byId(u.id))!.lockedUntil).toBe(2_120);
      expect(await r.security.recordLoginFailure(u.id + 77, policy, 1)).toBe(0);
    });

    test('login claims: counted before the check, refused while locked, at most maxFailures of a burst pass; a release undoes its own claim', async () => {
      const r = env().repos;
      const u = await seedUser(r);
      const policy = { maxFailures: 3, lockSeconds: 60 };
      const claims = await Promise.all(Array.from({ length: 10 }, () => r.security.claimLoginAttempt(u.id, policy, 1_000_000)));
      expect(claims.filter((c) => c.lockedUntil === 0)).toHaveLength(3);
      expect(claims.filter((c) => c.locked)).toHaveLength(1);
      expect(claims.filter((c) => c.lockedUntil === 1_060)).toHaveLength(7);
      // The claim that set the lock, given back (its check was not a failure): unlocked, one failure short of it.
      await r.security.releaseLoginAttempt(u.id, claims.find((c) => c.locked)!, policy);
      expect(await r.users.byId(u.id)).toMatchObject({ failedLogins: 2, lockCount: 0, lockedUntil: 0 });
      const next = await r.security.claimLoginAttempt(u.id, policy, 1_000_001);
      expect(next).toEqual({ lockedUntil: 0, locked: true });
      await r.security.releaseLoginAttempt(u.id, { lockedUntil: 0, locked: false }, policy);
      expect((await r.users.byId(u.id))!.failedLogins).toBe(0);
    });
  });
}
