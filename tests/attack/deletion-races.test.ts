/**
 * Requests racing the deletion of what they act on (PostgreSQL interleaves them; SQLite serialises most). Each
 * answered 500 `internal_error` when the delete landed between its check and its write:
 * - a relay key created for a user an admin deletes meanwhile: the insert hit the foreign key. Now the 404
 *   `user_not_found` the request gets after the delete;
 * - a management access token minted while the account is deleted during the password check: the foreign key. Now
 *   the 400 `invalid_current_password` of an account changed under the check, nothing minted;
 * - a login whose account is deleted during the password check: the session's foreign key. Now the 401
 *   `invalid_credentials` of an account changed under the check, no session left;
 * - a channel key removed, disabled or added while the channel is deleted: the key list's write went through, then
 *   settling the channel's status read the deleted row. Now as just before the delete, or 404 `channel_not_found`.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

type Answer = { status: number; body: any };
/**
 * `rounds` times: `setup` makes a subject, then `racers` run with `remove` (started `delay` ms later). Returns the
 * racers' answers as "status code"; every removal must succeed.
 */
async function race<T>(rounds: number, setup: (i: number) => Promise<T>, racers: (s: T) => Promise<Answer>[], remove: (s: T) => Promise<Answer>, delay = 0): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < rounds; i++) {
    const s = await setup(i);
    const [removed, ...answers] = await Promise.all([Bun.sleep(delay).then(() => remove(s)), ...racers(s)]);
    expect(removed!.status).toBe(200);
    for (const a of answers) out.push(`${a.status} ${a.body.error?.code ?? ''}`.trim());
  }
  return out;
}
const others = (answers: string[], ...allowed: string[]) => answers.filter((a) => !allowed.includes(a));

async function newUser(name: string): Promise<number> {
  const u = await gw.api('POST', '/api/user/', { username: name, password: `${name}-pass-123` });
  expect(u.status).toBe(200);
  return u.body.data.id;
}
const deleteUser = (id: number) => gw.api('DELETE', `/api/user/${id}`);
const orphans = (table: string, column = 'id') => gw.db.all(`SELECT ${column} FROM ${table} WHERE user_id NOT IN (SELECT id FROM users)`);

test('a relay key created for a user being deleted: 200 before the delete, else 404 user_not_found', async () => {
  const answers = await race(20, (i) => newUser(`leaving${i}`), (id) => [gw.api('POST', '/api/token/', { name: 'k', user_id: id })], deleteUser);
  expect(others(answers, '200', '404 user_not_found')).toEqual([]);
  expect(await orphans('api_keys')).toEqual([]);
});

test('an access token minted by a user being deleted: 200, or 400 invalid_current_password (nothing minted)', async () => {
  const answers = await race(10, async (i) => {
    const id = await newUser(`minting${i}`);
    return { id, password: `minting${i}-pass-123`, token: (await gw.services.auth.createAccessToken(id, 'own')).token };
  }, (u) => [gw.api('POST', '/api/user/access_token', { name: 'more', current_password: u.password }, u.token)], (u) => deleteUser(u.id), 20);
  expect(others(answers, '200', '400 invalid_current_password', '401 invalid_access_token')).toEqual([]);
  expect(await orphans('access_tokens')).toEqual([]);
});

test('a login racing the deletion of its account: 200 or 401 invalid_credentials', async () => {
  const answers = await race(10, async (i) => ({ id: await newUser(`going${i}`), name: `going${i}` }),
    (u) => [gw.api('POST', '/api/user/login', { username: u.name, password: `${u.name}-pass-123` }, null)], (u) => deleteUser(u.id), 15);
  expect(others(answers, '200', '401 invalid_credentials')).toEqual([]);
  expect(await orphans('sessions', 'id_hash')).toEqual([]);
});

test('channel key operations racing the deletion of their channel: 200 or 404 channel_not_found', async () => {
  const answers = await race(30, async (i) => {
    const c = await gw.api('POST', '/api/channel/', { name: `c${i}`, type: 'anthropic', base_url: 'http://127.0.0.1:9', key: 'k1', keys: ['k2'], models: ['m'] });
    expect(c.status).toBe(200);
    return c.body.data.id as number;
  }, (id) => [
    gw.api('DELETE', `/api/channel/${id}/keys/2`),
    gw.api('POST', `/api/channel/${id}/keys/1/disable`),
    gw.api('POST', `/api/channel/${id}/keys`, { keys: ['k3'] }),
  ], (id) => gw.api('DELETE', `/api/channel/${id}`));
  expect(others(answers, '200', '404 channel_not_found')).toEqual([]);
  expect(gw.logs.filter((l) => l.includes('request.bug'))).toEqual([]);
});
