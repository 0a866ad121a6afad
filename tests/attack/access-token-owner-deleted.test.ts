/**
 * A user minting a management access token while an admin deletes the user: the password check takes a while, the
 * delete commits meanwhile, and the token's insert hit the foreign key, answered 500 `internal_error` (PostgreSQL,
 * nearly always in this race). It gets the answer of an account that changed under the check (400
 * `invalid_current_password`, nothing minted), or 401 when the delete came before the credential was read.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

test('an access token minted by a user being deleted: never a 5xx, no token left', async () => {
  const answers: string[] = [];
  for (let i = 0; i < 10; i++) {
    const u = await gw.api('POST', '/api/user/', { username: `minting${i}`, password: 'minting-pass-123' });
    expect(u.status).toBe(200);
    const token = (await gw.services.auth.createAccessToken(u.body.data.id, 'own')).token;
    const [minted, deleted] = await Promise.all([
      gw.api('POST', '/api/user/access_token', { name: 'more', current_password: 'minting-pass-123' }, token),
      Bun.sleep(20).then(() => gw.api('DELETE', `/api/user/${u.body.data.id}`)),
    ]);
    expect(deleted.status).toBe(200);
    answers.push(`${minted.status} ${minted.body.error?.code ?? ''}`.trim());
  }
  expect(answers.filter((a) => a.startsWith('5'))).toEqual([]);
  expect(await gw.db.all('SELECT id FROM access_tokens WHERE user_id NOT IN (SELECT id FROM users)')).toEqual([]);
});
