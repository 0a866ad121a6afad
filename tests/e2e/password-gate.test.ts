/**
 * Password hashing (argon2id) is the most expensive thing the management API does, and callers choose when it
 * runs: logins for any name, token mints and password changes with a password they know. Each node runs at most
 * PASSWORD_HASH_SLOTS of them at once with PASSWORD_HASH_QUEUE waiting; the rest are 503 at once, the same for
 * every username and without counting as a failed login. PASSWORD_CHECKS_PER_MINUTE bounds the checks one
 * account (or username) gets, right passwords included.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { CLUSTER_NODES, ROOT_PASSWORD, makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfWindowEdge } from '../helpers/window-edge';

const login = (g: TestGateway, username: string, password: string) => g.api('POST', '/api/user/login', { username, password }, null);
/** An answer without its request id, for comparing two answers. */
const shape = (r: { status: number; body: any; headers: Headers }) => JSON.stringify([r.status, { ...r.body, request_id: undefined }, r.headers.get('retry-after')]);
const mint = (g: TestGateway, token: string, password: string) => g.api('POST', '/api/user/access_token', { name: 'ci', current_password: password }, token);

describe('node-wide password gate (1 slot, 1 waiting per node)', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway({ PASSWORD_HASH_SLOTS: '1', PASSWORD_HASH_QUEUE: '1', LOGIN_MAX_FAILURES: '1000' });
  });
  afterAll(async () => { await gw.stop(); });
  // More at once than every node's slot and queue together.
  const BURST = 2 * CLUSTER_NODES + 8;

  test('a burst of right-password logins: the excess is a clear 503 with retry-after; the account is not locked by it', async () => {
    const rs = await Promise.all(Array.from({ length: BURST }, () => login(gw, 'root', ROOT_PASSWORD)));
    const busy = rs.filter((r) => r.status === 503);
    expect(busy.length).toBeGreaterThan(0);
    expect(rs.filter((r) => r.status === 200).length).toBeGreaterThan(0);
    expect(rs.filter((r) => r.status !== 200 && r.status !== 503).map((r) => [r.status, r.body])).toEqual([]);
    for (const r of busy) {
      expect(r.body.error.code).toBe('password_checks_busy');
      expect(r.headers.get('retry-after')).toBe('1');
    }
    expect((await login(gw, 'root', ROOT_PASSWORD)).status).toBe(200);
  }, 30_000);

  test('as many at once as slot + queue all pass', async () => {
    for (let round = 0; round < 3; round++) {
      const rs = await Promise.all([login(gw, 'root', ROOT_PASSWORD), login(gw, 'root', ROOT_PASSWORD)]);
      expect(rs.map((r) => r.status)).toEqual([200, 200]);
    }
  }, 30_000);

  test('unknown and known usernames get the identical refusal', async () => {
    const u = await makeUser(gw);
    const rs = await Promise.all(Array.from({ length: BURST * 2 }, (_, i) => (i % 2 ? login(gw, u.username, 'wrong-password') : login(gw, `ghost-${i}`, 'wrong-password'))));
    const busyKnown = rs.filter((r, i) => i % 2 === 1 && r.status === 503);
    const busyUnknown = rs.filter((r, i) => i % 2 === 0 && r.status === 503);
    expect(busyKnown.length + busyUnknown.length).toBeGreaterThan(0);
    const shapes = new Set([...busyKnown, ...busyUnknown].map(shape));
    expect(shapes.size).toBe(1);
    // Every other answer is the ordinary wrong-password one, for both.
    for (const r of rs) if (r.status !== 503) expect(r.body.error.code).toBe('invalid_credentials');
    // Only the attempts that were checked count as failed logins of the real account, none of the refused ones.
    const checked = rs.filter((r, i) => i % 2 === 1 && r.status === 401).length;
    const row = await gw.db.get('select failed_logins f from users where id = ?', u.id);
    expect(Number(row.f)).toBe(checked);
  }, 30_000);

  test('token mints share the gate: the excess is 503 and mints no token', async () => {
    const u = await makeUser(gw);
    const rs = await Promise.all(Array.from({ length: BURST }, () => mint(gw, u.token, u.password)));
    const ok = rs.filter((r) => r.status === 200).length;
    expect(rs.filter((r) => r.status === 503 && r.body.error.code === 'password_checks_busy').length).toBe(BURST - ok);
    expect(ok).toBeLessThan(BURST);
    const live = await gw.db.get('select count(*) n from access_tokens where user_id = ? and revoked_at is null', u.id);
    expect(Number(live.n)).toBe(ok + 1); // + the test's own login token
  }, 30_000);
});

describe('per-account password checks (3 per minute, right passwords included)', () => {
  let gw: TestGateway;
  beforeAll(async () => { gw = await startGateway({ PASSWORD_CHECKS_PER_MINUTE: '3' }); });
  afterAll(async () => { await gw.stop(); });

  test('the 4th right-password token mint in a minute is 429 too_many_password_checks; another user is unaffected', async () => {
    const u = await makeUser(gw);
    // The 3 checks and the refused 4th and 5th in one window of the minute (clock-aligned in PostgreSQL mode).
    await clearOfWindowEdge(15_000);
    for (let i = 0; i < 3; i++) expect((await mint(gw, u.token, u.password)).status).toBe(200);
    const r = await mint(gw, u.token, u.password);
    expect(r.status).toBe(429);
    expect(r.body.error.code).toBe('too_many_password_checks');
    expect(Number(r.headers.get('retry-after'))).toBeGreaterThan(0);
    // Password change and 2FA use the same per-account count.
    expect((await gw.api('POST', '/api/user/password', { current_password: u.password, new_password: 'another-password-1' }, u.token)).status).toBe(429);
    const other = await makeUser(gw);
    expect((await mint(gw, other.token, other.password)).status).toBe(200);
  }, 30_000);

  test('the 4th right-password login for a username in a minute is 429, and an unknown username gets the same', async () => {
    const u = await makeUser(gw);
    // Both names' 4 logins in one window of the minute (clock-aligned in PostgreSQL mode).
    await clearOfWindowEdge(15_000);
    for (let i = 0; i < 3; i++) expect((await login(gw, u.username, u.password)).status).toBe(200);
    const known = await login(gw, u.username, u.password);
    const ghost = `ghost-${crypto.randomUUID().slice(0, 8)}`;
    for (let i = 0; i < 3; i++) expect((await login(gw, ghost, 'wrong-password')).status).toBe(401);
    const unknown = await login(gw, ghost, 'wrong-password');
    expect(known.status).toBe(429);
    expect(known.body.error.code).toBe('too_many_password_checks');
    // Same answer (the seconds to wait depend only on when each name's window fills).
    const { headers: _k, ...knownRest } = known;
    const { headers: _u, ...unknownRest } = unknown;
    expect({ ...unknownRest, body: { ...unknownRest.body, request_id: 0 } }).toEqual({ ...knownRest, body: { ...knownRest.body, request_id: 0 } });
    expect(Number(unknown.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(Number(known.headers.get('retry-after'))).toBeGreaterThan(0);
  }, 30_000);
});
