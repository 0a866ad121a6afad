import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

/**
 * The test helper makeUser writes a user the way the management API does: tests using it must see what production
 * would (every cache told at once, the balance a ledger entry), not a row slipped in under the caches.
 */
let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw?.stop(); });

describe('makeUser', () => {
  test('the user is in the directory as soon as it returns, with its group and status', async () => {
    const u = await makeUser(gw, 1, { group: 'team1' });
    // Read-your-writes as after POST /api/user/: no re-read from the database needed.
    expect(gw.services.userDirectory.get(u.id)).toMatchObject({ status: 1, group: 'team1' });
    const off = await makeUser(gw, 1, { status: 2 });
    expect(gw.services.userDirectory.get(off.id)).toMatchObject({ status: 2 });
  });

  test('an initial quota is a ledger entry, so the balance equals the sum of the ledger', async () => {
    const u = await makeUser(gw, 1, { quota: 12_345 });
    const row = await gw.db.get<{ quota: number }>('select quota from users where id = ?', u.id);
    const sum = await gw.db.get<{ s: number }>('select coalesce(sum(amount), 0) as s from ledger where user_id = ?', u.id);
    expect(Number(row!.quota)).toBe(12_345);
    expect(Number(sum!.s)).toBe(12_345);
  });

  test('the user can use the management API with the token it is given', async () => {
    const u = await makeUser(gw, 1, { email: `${crypto.randomUUID().slice(0, 8)}@example.com` });
    const r = await gw.api('GET', '/api/user/self', undefined, u.token);
    expect(r.status).toBe(200);
    expect(r.body.data.username).toBe(u.username);
  });
});
