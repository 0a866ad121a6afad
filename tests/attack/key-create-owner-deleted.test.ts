/**
 * An admin creating a relay key for a user while another deletes that user: the key's insert lost to the delete
 * and hit the foreign key, answered 500 `internal_error` (PostgreSQL, most of the time in this race). It is the
 * 404 `user_not_found` that the same request gets when the delete lands first, and no key is left without owner.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

test('a key created for a user being deleted: 200 before the delete, else 404 user_not_found, never a 5xx', async () => {
  const answers: string[] = [];
  for (let i = 0; i < 20; i++) {
    const u = await gw.api('POST', '/api/user/', { username: `leaving${i}`, password: 'leaving-pass-123' });
    expect(u.status).toBe(200);
    const [created, deleted] = await Promise.all([
      gw.api('POST', '/api/token/', { name: 'k', user_id: u.body.data.id }),
      gw.api('DELETE', `/api/user/${u.body.data.id}`),
    ]);
    expect(deleted.status).toBe(200);
    answers.push(`${created.status} ${created.body.error?.code ?? ''}`.trim());
  }
  expect(answers.filter((a) => a !== '200' && a !== '404 user_not_found')).toEqual([]);
  expect(await gw.db.all('SELECT id FROM api_keys WHERE user_id NOT IN (SELECT id FROM users)')).toEqual([]);
});
