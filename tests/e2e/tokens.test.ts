import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { sha256Hex } from '@gw/core';
import { ipAllowed } from '@gw/identity';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

describe('API keys (/api/token/)', () => {
  test('create shows the sk- key once, stores only its hash, and the in-memory lookup finds it', async () => {
    const u = await makeUser(gw);
    const future = Math.floor(Date.now() / 1000) + 3600;
    const r = await gw.api('POST', '/api/token/', {
      name: 'laptop', expires_at: future, unlimited_quota: false, remain_quota: 1000, models: ['claude-a'],
      allow_ips: ['10.0.0.0/8', '2001:db8::/32', '127.0.0.1'], rate_limit_rpm: 60,
    }, u.token);
    expect(r.status).toBe(200);
    const key = r.body.data.key as string;
    expect(key).toMatch(/^sk-[0-9A-Za-z]{48}$/);
    expect(r.body.data).toMatchObject({
      user_id: u.id, name: 'laptop', status: 1, expires_at: future, unlimited_quota: false, remain_quota: 1000,
      models: ['claude-a'], allow_ips: ['10.0.0.0/8', '2001:db8::/32', '127.0.0.1'], group: null, rate_limit_rpm: 60, prefix: key.slice(0, 8),
    });
    const row = (await gw.db.get('select key_hash, prefix from api_keys where id = ?', r.body.data.id)) as any;
    expect(row.key_hash).toBe(sha256Hex(key));
    expect(JSON.stringify((await gw.db.all('select * from api_keys')))).not.toContain(key);
    const rec = gw.services.apiKeys.lookup(key)!;
    expect(rec).toMatchObject({ id: r.body.data.id, userId: u.id, status: 1, unlimitedQuota: false, remainQuota: 1000, models: ['claude-a'], rateLimitRpm: 60 });
    expect(gw.services.apiKeys.lookup(`${key}x`)).toBeUndefined();
    // Never returned again.
    const got = await gw.api('GET', `/api/token/${r.body.data.id}`, undefined, u.token);
    expect(got.body.data).not.toHaveProperty('key');
    expect(JSON.stringify((await gw.api('GET', '/api/token/', undefined, u.token)).body)).not.toContain(key);
  });

  test('defaults, list own keys only, update (incl. status) and delete refresh the index', async () => {
    const u = await makeUser(gw);
    const other = await makeUser(gw);
    const created = await gw.api('POST', '/api/token/', { name: 'a' }, u.token);
    expect(created.body.data).toMatchObject({ unlimited_quota: true, remain_quota: 0, models: null, allow_ips: null, expires_at: null, rate_limit_rpm: 0 });
    await gw.api('POST', '/api/token/', { name: 'b' }, u.token);
    await gw.api('POST', '/api/token/', { name: 'theirs' }, other.token);
    const list = await gw.api('GET', '/api/token/?p=1&page_size=10', undefined, u.token);
    expect(list.body.data.items.map((k: any) => k.name).sort()).toEqual(['a', 'b']);
    expect(list.body.data).toMatchObject({ total: 2, page: 1, page_size: 10 });
    const id = created.body.data.id;
    const key = created.body.data.key;
    const upd = await gw.api('PUT', '/api/token/', { id, status: 2, name: 'renamed', models: [], allow_ips: null }, u.token);
    expect(upd.body.data).toMatchObject({ status: 2, name: 'renamed', models: null, allow_ips: null });
    expect(gw.services.apiKeys.lookup(key)?.status).toBe(2);
    await gw.api('PUT', '/api/token/', { id, status: 1, remain_quota: 42, unlimited_quota: false }, u.token);
    expect(gw.services.apiKeys.lookup(key)).toMatchObject({ status: 1, remainQuota: 42, unlimitedQuota: false });
    // Another user's key is invisible (404), not forbidden.
    expect((await gw.api('GET', `/api/token/${id}`, undefined, other.token)).status).toBe(404);
    expect((await gw.api('PUT', '/api/token/', { id, name: 'x' }, other.token)).status).toBe(404);
    expect((await gw.api('DELETE', `/api/token/${id}`, undefined, other.token)).status).toBe(404);
    expect((await gw.api('DELETE', `/api/token/${id}`, undefined, u.token)).status).toBe(200);
    expect(gw.services.apiKeys.lookup(key)).toBeUndefined();
    expect((await gw.api('GET', `/api/token/${id}`, undefined, u.token)).status).toBe(404);
  });

  test('admins act for other users with user_id, within the role rules', async () => {
    const admin = await makeUser(gw, 10);
    const user = await makeUser(gw, 1);
    const peer = await makeUser(gw, 10);
    const made = await gw.api('POST', '/api/token/', { name: 'for-user', user_id: user.id, group: 'anything' }, admin.token);
    expect(made.status).toBe(200);
    expect(made.body.data).toMatchObject({ user_id: user.id, group: 'anything' });
    const list = await gw.api('GET', `/api/token/?user_id=${user.id}`, undefined, admin.token);
    expect(list.body.data.items.map((k: any) => k.id)).toEqual([made.body.data.id]);
    expect((await gw.api('GET', `/api/token/${made.body.data.id}`, undefined, admin.token)).status).toBe(200);
    expect((await gw.api('PUT', '/api/token/', { id: made.body.data.id, status: 2 }, admin.token)).body.data.status).toBe(2);
    expect((await gw.api('POST', '/api/token/', { name: 'x', user_id: peer.id }, admin.token)).status).toBe(403);
    expect((await gw.api('GET', `/api/token/?user_id=${peer.id}`, undefined, admin.token)).status).toBe(403);
    expect((await gw.api('GET', `/api/token/?user_id=${admin.id}`, undefined, user.token)).status).toBe(403);
    expect((await gw.api('GET', `/api/token/?user_id=${user.id}`, undefined, user.token)).status).toBe(200);
    expect((await gw.api('POST', '/api/token/', { name: 'x', user_id: 999999 }, admin.token)).status).toBe(404);
    // Root may act for an admin.
    expect((await gw.api('POST', '/api/token/', { name: 'by-root', user_id: peer.id })).status).toBe(200);
  });

  test('a user may only use their own group', async () => {
    const u = await makeUser(gw, 1, { group: 'team1' });
    expect((await gw.api('POST', '/api/token/', { name: 'g', group: 'team1' }, u.token)).status).toBe(200);
    const r = await gw.api('POST', '/api/token/', { name: 'g', group: 'vip' }, u.token);
    expect(r.status).toBe(403);
    expect(r.body.error).toMatchObject({ code: 'group_not_allowed', param: 'group' });
  });

  test('bad input names the field', async () => {
    const u = await makeUser(gw);
    const now = Math.floor(Date.now() / 1000);
    const cases: Array<[Record<string, unknown>, string]> = [
      [{}, 'name'],
      [{ name: '' }, 'name'],
      [{ name: 'x', expires_at: now - 10 }, 'expires_at'],
      [{ name: 'x', expires_at: String(now + 100) }, 'expires_at'],
      [{ name: 'x', remain_quota: -1 }, 'remain_quota'],
      [{ name: 'x', remain_quota: '5' }, 'remain_quota'],
      [{ name: 'x', unlimited_quota: 'yes' }, 'unlimited_quota'],
      [{ name: 'x', allow_ips: ['10.0.0.0/33'] }, 'allow_ips[0]'],
      [{ name: 'x', allow_ips: ['1.2.3.4', 'example.com'] }, 'allow_ips[1]'],
      [{ name: 'x', allow_ips: ['::1/129'] }, 'allow_ips[0]'],
      [{ name: 'x', models: 'claude' }, 'models'],
      [{ name: 'x', rate_limit_rpm: -5 }, 'rate_limit_rpm'],
      [{ name: 'x', group: 'bad group' }, 'group'],
    ];
    for (const [body, param] of cases) {
      const r = await gw.api('POST', '/api/token/', body, u.token);
      expect({ body, status: r.status, param: r.body.error?.param }).toEqual({ body, status: 400, param });
    }
    expect((await gw.api('PUT', '/api/token/', { id: 999999, name: 'x' }, u.token)).status).toBe(404);
    expect((await gw.api('GET', '/api/token/999999', undefined, u.token)).status).toBe(404);
    expect((await gw.api('DELETE', '/api/token/999999', undefined, u.token)).status).toBe(404);
    const malformed = await gw.api('POST', '/api/token/', '{"name": "x",', u.token);
    expect(malformed.status).toBe(400);
    expect(malformed.body.error.code).toBe('invalid_json');
    const extra = await gw.api('POST', '/api/token/', { name: 'extra', key_hash: 'mine', id: 1, used_quota: 5 }, u.token);
    expect(extra.status).toBe(200);
    expect(extra.body.data.used_quota).toBe(0);
    expect(extra.body.data.key).toMatch(/^sk-/);
    expect((await gw.api('PUT', '/api/token/', { id: 1, status: 3 }, u.token)).body.error.param).toBe('status');
  });

  test('ipAllowed matches IPv4, IPv6, CIDRs and IPv4-mapped IPv6', () => {
    expect(ipAllowed(null, '1.2.3.4')).toBe(true);
    expect(ipAllowed([], '1.2.3.4')).toBe(true);
    expect(ipAllowed(['10.0.0.0/8'], '10.200.3.4')).toBe(true);
    expect(ipAllowed(['10.0.0.0/8'], '11.0.0.1')).toBe(false);
    expect(ipAllowed(['10.0.0.0/8'], '::ffff:10.1.1.1')).toBe(true);
    expect(ipAllowed(['127.0.0.1'], '127.0.0.1')).toBe(true);
    expect(ipAllowed(['127.0.0.1'], '127.0.0.2')).toBe(false);
    expect(ipAllowed(['2001:db8::/32'], '2001:db8:ffff::1')).toBe(true);
    expect(ipAllowed(['2001:db8::/32'], '2001:db9::1')).toBe(false);
    expect(ipAllowed(['::1'], '::1')).toBe(true);
    expect(ipAllowed(['::ffff:192.168.0.0/112'], '192.168.7.7')).toBe(true);
    expect(ipAllowed(['0.0.0.0/0'], '8.8.8.8')).toBe(true);
    expect(ipAllowed(['0.0.0.0/0'], '2001:db8::1')).toBe(false);
    expect(ipAllowed(['10.0.0.0/8'], 'garbage')).toBe(false);
  });
});
