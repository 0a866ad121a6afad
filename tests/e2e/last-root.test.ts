/**
 * At least one enabled root user always stays: no demotion or disabling (PUT /api/user/, enable/disable) may
 * leave none, whoever asks, with disabled roots not counting, and two roots demoting or disabling each other at
 * once cannot both succeed (the check and the write are one atomic step on either backend, every node).
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
let rootId: number;
beforeAll(async () => {
  gw = await startGateway();
  rootId = (await gw.services.users.byUsername('root'))!.id;
}, 30_000);
afterAll(async () => { await gw.stop(); });

// Read from the database, not the API: the default (root) token stops working while that root is disabled.
const enabledRoots = async () => (await gw.services.users.list({ role: 100, status: 1, offset: 0, limit: 100 })).items.map((u) => u.id).sort((a, b) => a - b);

test('the last enabled root cannot demote itself, also when disabled roots exist: 409 last_root, nothing changes', async () => {
  const dormant = await makeUser(gw, 100, { status: 2 });
  for (const role of [10, 1]) {
    const r = await gw.api('PUT', '/api/user/', { id: rootId, role });
    expect([r.status, r.body.success, r.body.error.code, r.body.error.param]).toEqual([409, false, 'last_root', 'role']);
    expect(r.body.error.message).toContain('no enabled root');
  }
  expect(await enabledRoots()).toEqual([rootId]);
  // The disabled root may be demoted (it is not what keeps the gateway manageable).
  expect((await gw.api('PUT', '/api/user/', { id: dormant.id, role: 10 })).status).toBe(200);
});

test('another root cannot disable or demote the last enabled root, by any route', async () => {
  const other = await makeUser(gw, 100);
  // Root disables the other root: fine, one stays.
  expect((await gw.api('POST', `/api/user/${other.id}/disable`)).status).toBe(200);
  expect(await enabledRoots()).toEqual([rootId]);
  // Re-enabled, the other demotes then tries to disable the first: once only one is left, refused.
  expect((await gw.api('POST', `/api/user/${other.id}/enable`)).status).toBe(200);
  expect((await gw.api('PUT', '/api/user/', { id: rootId, role: 10, status: 2 }, other.token)).status).toBe(200);
  expect(await enabledRoots()).toEqual([other.id]);
  const selfDemote = await gw.api('PUT', '/api/user/', { id: other.id, role: 10 }, other.token);
  expect([selfDemote.status, selfDemote.body.error.code]).toEqual([409, 'last_root']);
  // Giving root back goes through the same guard and is allowed (it adds a root).
  expect((await gw.api('PUT', '/api/user/', { id: rootId, role: 100, status: 1 }, other.token)).status).toBe(200);
  expect(await enabledRoots()).toEqual([rootId, other.id]);
  // A plain field change of the last root still works (no role or status in it).
  expect((await gw.api('POST', `/api/user/${other.id}/disable`)).status).toBe(200);
  expect((await gw.api('PUT', '/api/user/', { id: rootId, display_name: 'still root' })).status).toBe(200);
  expect((await gw.api('PUT', '/api/user/', { id: rootId, status: 1, role: 100 })).status).toBe(200);
});

test('race: the last two enabled roots demoting or disabling each other at once: exactly one succeeds', async () => {
  // Start from exactly two enabled roots: demote every other one first.
  for (const id of await enabledRoots()) if (id !== rootId) expect((await gw.api('PUT', '/api/user/', { id, role: 1 })).status).toBe(200);
  const rootToken = gw.rootToken;
  for (let round = 0; round < 8; round++) {
    const b = await makeUser(gw, 100);
    expect(await enabledRoots()).toEqual([rootId, b.id]);
    // Even rounds: each demotes itself (both requests are authorised, only the guard can refuse one). Odd rounds:
    // each demotes or disables the other (the loser may also be refused as no longer root: 403).
    const self = round % 2 === 0;
    const change = round % 4 < 2 ? { role: 10 } : { status: 2 };
    const [x, y] = await Promise.all([
      gw.api('PUT', '/api/user/', { id: self ? rootId : b.id, ...(self ? { role: 10 } : change) }, rootToken),
      gw.api('PUT', '/api/user/', { id: self ? b.id : rootId, ...(self ? { role: 1 } : change) }, b.token),
    ]);
    const loser = [x, y].find((r) => r.status !== 200)!;
    expect([x, y].filter((r) => r.status === 200)).toHaveLength(1);
    if (self) expect([loser.status, loser.body.error.code]).toEqual([409, 'last_root']);
    else expect([401, 403, 409]).toContain(loser.status); // 401: its own account was disabled first
    const left = await enabledRoots();
    expect(left).toHaveLength(1);
    // Put things back: the survivor restores the first root, then the helper root is retired for the next round.
    const survivorToken = left[0] === rootId ? rootToken : b.token;
    if (left[0] !== rootId) expect((await gw.api('PUT', '/api/user/', { id: rootId, role: 100, status: 1 }, survivorToken)).status).toBe(200);
    expect((await gw.api('PUT', '/api/user/', { id: b.id, role: 1, status: 1 }, rootToken)).status).toBe(200);
    expect(await enabledRoots()).toEqual([rootId]);
  }
}, 30_000);
