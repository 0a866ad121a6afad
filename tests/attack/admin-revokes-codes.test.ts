/**
 * Redemption batches follow the role rule of everything else an admin changes: an admin below root revokes only
 * batches it minted (or that a user below it minted), never root's or another admin's. Root's codes are the only
 * ones an admin may redeem; a peer admin revoking them before they are handed out, or root revoking an admin's
 * batch, must stay distinguishable. Revoking answered 200 for any batch name an admin saw in the listing.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); }, 30_000);
afterAll(async () => { await gw.stop(); }, 30_000);

const mint = async (batch: string, token?: string) => {
  const r = await gw.api('POST', '/api/redemption/', { batch, count: 2, quota: 100, expires_at: Math.floor(Date.now() / 1000) + 3600 }, token);
  expect(r.status).toBe(200);
  return r.body.data.codes as string[];
};
const unusedOf = async (batch: string) =>
  (await gw.api('GET', `/api/redemption/?batch=${batch}&status=unused`)).body.data.total as number;

test("an admin cannot revoke root's batch nor another admin's; the codes stay redeemable", async () => {
  const admin = await makeUser(gw, 10);
  const peer = await makeUser(gw, 10);
  const rootCodes = await mint('root-batch');
  await mint('peer-batch', peer.token);
  for (const batch of ['root-batch', 'peer-batch']) {
    const r = await gw.api('POST', '/api/redemption/revoke', { batch }, admin.token);
    expect({ batch, status: r.status, code: r.body.error?.code, param: r.body.error?.param })
      .toEqual({ batch, status: 403, code: 'role_too_high', param: 'batch' });
    expect(await unusedOf(batch)).toBe(2);
  }
  // Root's code still credits an admin (the one kind of code an admin may redeem).
  const redeemed = await gw.api('POST', '/api/user/redeem', { code: rootCodes[0] }, admin.token);
  expect({ status: redeemed.status, quota: redeemed.body.data?.quota }).toEqual({ status: 200, quota: 100 });
});

test('an admin revokes its own batches; root revokes anyone\'s; an unknown batch is 404 for both', async () => {
  const admin = await makeUser(gw, 10);
  await mint('own-batch', admin.token);
  await mint('admin-batch-for-root', admin.token);
  const own = await gw.api('POST', '/api/redemption/revoke', { batch: 'own-batch' }, admin.token);
  expect({ status: own.status, revoked: own.body.data?.revoked }).toEqual({ status: 200, revoked: 2 });
  const byRoot = await gw.api('POST', '/api/redemption/revoke', { batch: 'admin-batch-for-root' });
  expect({ status: byRoot.status, revoked: byRoot.body.data?.revoked }).toEqual({ status: 200, revoked: 2 });
  for (const token of [admin.token, gw.rootToken]) {
    const r = await gw.api('POST', '/api/redemption/revoke', { batch: 'no-such-batch' }, token);
    expect({ status: r.status, code: r.body.error?.code }).toEqual({ status: 404, code: 'batch_not_found' });
  }
});

test('a plain user is refused the route before any batch is looked at', async () => {
  const user = await makeUser(gw);
  await mint('user-probe-batch');
  const r = await gw.api('POST', '/api/redemption/revoke', { batch: 'user-probe-batch' }, user.token);
  expect({ status: r.status, code: r.body.error?.code }).toEqual({ status: 403, code: 'insufficient_role' });
  expect(await unusedOf('user-probe-batch')).toBe(2);
});
