/**
 * An admin (not root) probing key ids: a relay key of root or of another admin is not the admin's to see or
 * change, and must be answered exactly like an id that does not exist (404 token_not_found), on every route that
 * takes a key id; a 403 there told the admin which ids exist and that they belong to someone above it. Routes that
 * are admin-only still answer a plain user 403, and an admin still manages the keys of users below it.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); }, 30_000);
afterAll(async () => { await gw.stop(); }, 30_000);

/** Status, code and param of an answer, with the id it names replaced, so two ids' answers compare equal. */
const shape = (r: { status: number; body: any }, id: number) =>
  ({ status: r.status, code: r.body.error?.code, param: r.body.error?.param, message: String(r.body.error?.message).replaceAll(String(id), 'N') });

test("an admin naming root's or another admin's key gets the unknown id's answer on every key route", async () => {
  const admin = await makeUser(gw, 10);
  const peer = await makeUser(gw, 10);
  const rootKey = await gw.api('POST', '/api/token/', { name: 'root-key' });
  const peerKey = await gw.api('POST', '/api/token/', { name: 'peer-key' }, peer.token);
  expect([rootKey.status, peerKey.status]).toEqual([200, 200]);
  const unknown = 999_999;

  const probes: Array<[string, (id: number) => Promise<{ status: number; body: any }>]> = [
    ['GET /api/token/:id', (id) => gw.api('GET', `/api/token/${id}`, undefined, admin.token)],
    ['PUT /api/token/', (id) => gw.api('PUT', '/api/token/', { id, name: 'mine-now' }, admin.token)],
    ['DELETE /api/token/:id', (id) => gw.api('DELETE', `/api/token/${id}`, undefined, admin.token)],
    ['PUT /api/budget/ (key)', (id) => gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: id, period: 'daily', limit: 5 }, admin.token)],
  ];
  for (const [route, probe] of probes) {
    const none = shape(await probe(unknown), unknown);
    expect(none.status).toBe(404);
    for (const [whose, id] of [['root', rootKey.body.data.id], ['peer admin', peerKey.body.data.id]] as const) {
      expect({ route, whose, ...shape(await probe(id), id) }).toEqual({ route, whose, ...none });
    }
  }
  // Nothing changed: both keys are there, with their names and no budget.
  expect((await gw.api('GET', `/api/token/${rootKey.body.data.id}`)).body.data.name).toBe('root-key');
  expect((await gw.api('GET', `/api/token/${peerKey.body.data.id}`, undefined, peer.token)).body.data.name).toBe('peer-key');
  expect((await gw.api('GET', `/api/budget/?scope=key&subject_id=${peerKey.body.data.id}`)).body.data).toEqual([]);
}, 30_000);

test('an admin still manages keys below it; admin-only routes still answer a plain user 403', async () => {
  const admin = await makeUser(gw, 10);
  const user = await makeUser(gw, 1);
  const key = await gw.api('POST', '/api/token/', { name: 'users-key' }, user.token);
  expect((await gw.api('GET', `/api/token/${key.body.data.id}`, undefined, admin.token)).status).toBe(200);
  expect((await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: key.body.data.id, period: 'daily', limit: 5 }, admin.token)).status).toBe(200);
  expect((await gw.api('DELETE', `/api/token/${key.body.data.id}`, undefined, admin.token)).status).toBe(200);
  for (const [method, path] of [['GET', `/api/user/${admin.id}`], ['GET', '/api/budget/'], ['GET', '/api/log/']]) {
    const r = await gw.api(method, path, undefined, user.token);
    expect([path, r.status, r.body.error?.code]).toEqual([path, 403, 'insufficient_role']);
  }
}, 30_000);
