/**
 * A login whose account an admin deletes while its password is checked: the session's insert hit the foreign key
 * and answered 500 `internal_error` (PostgreSQL, nearly always in this race). It is the 401 `invalid_credentials`
 * of an account changed under the check (README: Accounts and credentials), and no session is left.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

test('a login racing the deletion of its account: 200 or 401 invalid_credentials, never a 5xx', async () => {
  const answers: string[] = [];
  for (let i = 0; i < 10; i++) {
    const u = await gw.api('POST', '/api/user/', { username: `going${i}`, password: 'going-pass-123' });
    expect(u.status).toBe(200);
    const [login, deleted] = await Promise.all([
      gw.api('POST', '/api/user/login', { username: `going${i}`, password: 'going-pass-123' }, null),
      Bun.sleep(15).then(() => gw.api('DELETE', `/api/user/${u.body.data.id}`)),
    ]);
    expect(deleted.status).toBe(200);
    answers.push(`${login.status} ${login.body.error?.code ?? ''}`.trim());
  }
  expect(answers.filter((a) => a !== '200' && a !== '401 invalid_credentials')).toEqual([]);
  expect(await gw.db.all('SELECT id_hash FROM sessions WHERE user_id NOT IN (SELECT id FROM users)')).toEqual([]);
});
