/**
 * One record created by several requests at once (one node, or several behind a load balancer whose caches
 * have not heard of each other's creation yet) must end as if they came one after another, never as a 500 from
 * the database's unique index: one group name (one 200, the rest 409 group_exists), one budget (every PUT 200,
 * one row holding one of their limits).
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { keyedUser } from './relay-setup';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startGateway();
});
afterAll(async () => {
  await gw.stop();
});

describe('creating a group', () => {
  test('8 concurrent creates of one name: one 200, seven 409 group_exists; the group exists once', async () => {
    const rs = await Promise.all(Array.from({ length: 8 }, (_, i) => gw.api('POST', '/api/group/', { name: 'raced', ratio: 1000 + i })));
    const codes = rs.map((r) => [r.status, r.body.error?.code ?? null]).sort();
    expect(codes).toEqual([[200, null], ...Array(7).fill([409, 'group_exists'])]);
    const list = await gw.api('GET', '/api/group/');
    expect(list.body.data.filter((g: { name: string }) => g.name === 'raced')).toHaveLength(1);
  }, 15_000);
});

describe('setting a budget', () => {
  test('8 concurrent PUTs of one new budget: all 200, one budget, holding one of the limits sent', async () => {
    const u = await keyedUser(gw, 0);
    const limits = Array.from({ length: 8 }, (_, i) => 1_000 * (i + 1));
    const rs = await Promise.all(limits.map((limit) => gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: u.id, period: 'daily', limit })));
    expect(rs.map((r) => [r.status, r.body.error?.code ?? null])).toEqual(Array(8).fill([200, null]));
    const list = await gw.api('GET', `/api/budget/?scope=user&subject_id=${u.id}`);
    expect(list.body.data).toHaveLength(1);
    expect(limits).toContain(list.body.data[0].limit);
  }, 15_000);
});

describe('one e-mail address', () => {
  test('taken by 6 concurrent user creations: one 200, five 409 email_taken', async () => {
    const email = `race-${crypto.randomUUID().slice(0, 8)}@example.com`;
    const rs = await Promise.all(Array.from({ length: 6 }, (_, i) => gw.api('POST', '/api/user/', { username: `race${i}-${email.slice(5, 13)}`, password: 'race-password-1', email })));
    expect(rs.map((r) => [r.status, r.body.error?.code ?? null]).sort()).toEqual([[200, null], ...Array(5).fill([409, 'email_taken'])]);
  }, 15_000);

  test('set by 6 users on themselves at once: one 200, five 409 email_taken', async () => {
    const users = await Promise.all(Array.from({ length: 6 }, () => keyedUser(gw, 0)));
    const email = `race-${crypto.randomUUID().slice(0, 8)}@example.com`;
    const rs = await Promise.all(users.map((u) => gw.api('PUT', '/api/user/self', { email, current_password: u.password }, u.token)));
    expect(rs.map((r) => [r.status, r.body.error?.code ?? null]).sort()).toEqual([[200, null], ...Array(5).fill([409, 'email_taken'])]);
  }, 15_000);
});
