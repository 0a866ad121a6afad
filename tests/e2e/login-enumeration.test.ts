/**
 * Login answers reveal neither which usernames exist nor whether a password is right, over real HTTP:
 * an unknown name locks out exactly like a real one, and a disabled account answers like a wrong
 * password even when the password is right.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway({ LOGIN_MAX_FAILURES: '3', LOGIN_LOCK_SECONDS: '30' }); });
afterAll(async () => { await gw.stop(); });

const login = (username: string, password: string) => gw.api('POST', '/api/user/login', { username, password }, null);
/** What a client can observe of an answer: status, error object, retry-after. */
const seen = (r: { status: number; body: any; headers: Headers }) => ({
  status: r.status, error: r.body.error, success: r.body.success, message: r.body.message, retryAfter: r.headers.get('retry-after'),
});
/** The answers to `n` wrong attempts followed by one more, with request ids removed (they differ by design). */
async function transcript(username: string, password: string, n: number) {
  const out = [];
  for (let i = 0; i <= n; i++) {
    const s = seen(await login(username, password));
    out.push({ ...s, error: { ...s.error, request_id: undefined } });
  }
  return out;
}

/**
 * The same answers; retry-after counts down the lock in whole seconds, so two transcripts taken a moment
 * apart may round to neighbouring values (31 against 30, seen behind the cluster proxy and on PostgreSQL).
 */
function expectSameAnswers(a: Awaited<ReturnType<typeof transcript>>, b: Awaited<ReturnType<typeof transcript>>) {
  const secs = (xs: typeof a) => xs.map((x) => (x.retryAfter === null ? null : Number(x.retryAfter)));
  const drop = (xs: typeof a) => xs.map((x) => ({ ...x, retryAfter: x.retryAfter === null ? null : 'n' }));
  expect(drop(a)).toEqual(drop(b));
  const [sa, sb] = [secs(a), secs(b)];
  for (const [i, v] of sa.entries()) if (v !== null) expect(Math.abs(v - sb[i]!)).toBeLessThanOrEqual(1);
}

describe('no username enumeration', () => {
  test('an unknown username is counted and locked out exactly like an existing one', async () => {
    const u = await makeUser(gw);
    const known = await transcript(u.username, 'wrong-password-1', 3);
    const unknown = await transcript(`ghost-${crypto.randomUUID().slice(0, 8)}`, 'wrong-password-1', 3);
    expect(known.slice(0, 3).map((x) => x.status)).toEqual([401, 401, 401]);
    expect(known[3]!.status).toBe(429);
    expect(known[3]!.error.code).toBe('account_locked');
    expectSameAnswers(unknown, known);
    // Locked names stay locked for the right password too (nothing to learn by trying it).
    expect((await login(u.username, u.password)).status).toBe(429);
  });
});

describe('no username enumeration under a parallel burst', () => {
  test('a burst on an unknown name is answered like the same burst on a real one', async () => {
    const g = await startGateway({ LOGIN_MAX_FAILURES: '3', LOGIN_LOCK_SECONDS: '30', LOGIN_IP_PER_MINUTE: '1000' });
    try {
      const u = await makeUser(g);
      const burst = async (username: string) => {
        const res = await Promise.all(Array.from({ length: 12 }, () => g.api('POST', '/api/user/login', { username, password: 'wrong-password-1' }, null)));
        const tally: Record<string, number> = {};
        for (const r of res) tally[`${r.status} ${r.body.error?.code}`] = (tally[`${r.status} ${r.body.error?.code}`] ?? 0) + 1;
        return tally;
      };
      const known = await burst(u.username);
      expect(known).toEqual({ '401 invalid_credentials': 3, '429 account_locked': 9 });
      expect(await burst(`ghost-${crypto.randomUUID().slice(0, 8)}`)).toEqual(known);
    } finally {
      await g.stop();
    }
  }, 30_000);
});

describe('no password oracle on disabled accounts', () => {
  test('a disabled account answers exactly like a wrong password, right password or not, and locks out the same way', async () => {
    const enabled = await makeUser(gw);
    const disabled = await makeUser(gw);
    expect((await gw.api('POST', `/api/user/${disabled.id}/disable`)).status).toBe(200);
    const wrongOnEnabled = await transcript(enabled.username, 'wrong-password-1', 3);
    const rightOnDisabled = await transcript(disabled.username, disabled.password, 3);
    expect(rightOnDisabled[0]!.status).toBe(401);
    expect(rightOnDisabled[0]!.error.code).toBe('invalid_credentials');
    expectSameAnswers(rightOnDisabled, wrongOnEnabled);
  });
});
