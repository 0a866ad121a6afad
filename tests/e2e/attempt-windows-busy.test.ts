/**
 * PostgreSQL mode counts the account flows' attempts (login and reset per address, logins per username) in the
 * database, before anything about the caller is known. Those writes share the pool with settlements, which a
 * metered request waits for before its answer: an anonymous flood of logins from many addresses must not be able
 * to take every connection. Here the attempt table is held locked (a slow or contended database), a flood of
 * logins from distinct addresses arrives, and a metered request must still be answered and settled while the
 * excess logins are refused at once with a 503 of their own.
 * Everything goes to this process's node (the cap and the pool are per process).
 * PostgreSQL only: SQLite mode counts these attempts in memory.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import postgres from 'postgres';
import { ON_PG, startGateway, type TestGateway } from '../helpers/gateway';
import { setTrustProxy } from '../../apps/server/src/plugins/client-ip';
import { addChannel, keyedUser, msg, setPrice, upstream, V, type Scripted } from './relay-setup';

/** Attempt checks that may wait (the default is far longer), and more logins than they and the 2 running admit. */
const QUEUE = 32;
const FLOOD = 40;

let gw: TestGateway;
let up: Scripted;
beforeAll(async () => {
  if (!ON_PG) return;
  // Behind a trusted proxy, so every login is its own client address (the other nodes read TRUST_PROXY themselves).
  setTrustProxy(true);
  gw = await startGateway({ TRUST_PROXY: 'true', LOGIN_IP_PER_MINUTE: '30', ATTEMPT_CHECKS_QUEUE: String(QUEUE) });
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['busy-m'] });
  await setPrice(gw, 'busy-m');
}, 30_000);
afterAll(async () => {
  setTrustProxy(false);
  await up?.stop();
  await gw?.stop();
});


test.skipIf(!ON_PG)('a login flood on a stalled attempt table leaves the pool to settlements; the excess is 503 at once', async () => {
  const u = await keyedUser(gw);
  const { databaseUrl, pgSchema } = gw.services.config;
  const other = postgres(databaseUrl, { max: 1, connection: { search_path: pgSchema }, onnotice: () => {} });
  let unlock!: () => void;
  const unlocked = new Promise<void>((r) => { unlock = r; });
  let locked!: () => void;
  const isLocked = new Promise<void>((r) => { locked = r; });
  // Inserts and updates wait for this lock; reads (and every other table) do not.
  const holder = other.begin(async (tx) => {
    await tx`lock table attempt_windows in exclusive mode`;
    locked();
    await unlocked;
  });
  const answered: Array<[number, string]> = [];
  let logins: Array<Promise<{ status: number; body: any }>> = [];
  try {
    await isLocked;
    logins = Array.from({ length: FLOOD }, (_, i) => gw.nodeApi('POST', '/api/user/login', { username: `flood-${i}`, password: 'wrong-password' }, null, { 'x-forwarded-for': `192.0.2.${i + 1}` })
      .then((r) => { answered.push([r.status, r.body?.error?.code]); return r; }));
    await Bun.sleep(300);
    const t0 = performance.now();
    const res = await fetch(`${gw.nodeUrl}/v1/messages`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': u.key, ...V },
      body: JSON.stringify(msg('busy-m')), signal: AbortSignal.timeout(5_000),
    }).catch((e) => e as Error);
    const took = performance.now() - t0;
    expect(res instanceof Response ? res.status : String(res)).toBe(200);
    expect(took).toBeLessThan(5_000);
    // Those past the running and waiting attempt checks were told so at once, without waiting for the database.
    expect(answered).toEqual(Array(FLOOD - 2 - QUEUE).fill([503, 'attempt_checks_busy']));
    unlock();
    const all = await Promise.all(logins);
    // Every login ends with an answer of its own: a wrong password, or busy; never a server error.
    for (const r of all) expect([[401, 'invalid_credentials'], [503, 'attempt_checks_busy']]).toContainEqual([r.status, r.body?.error?.code]);
    expect(all.filter((r) => r.status === 401).length).toBeGreaterThan(0);
  } finally {
    unlock();
    await Promise.allSettled(logins);
    await holder.catch(() => {});
    await other.end();
  }
}, 30_000);

// Behind a trusted proxy the client names its own address; one that is not an address at all was counted under
// itself, whole: a few kilobytes of random text made the count's row too big for the table's index (a 500).
test.skipIf(!ON_PG)('a forwarded "address" of kilobytes of text is counted like any other, not a server error', async () => {
  const junk = Array.from({ length: 6_000 }, () => String.fromCharCode(97 + Math.floor(Math.random() * 26))).join('');
  const r = await gw.nodeApi('POST', '/api/user/login', { username: `junk-${crypto.randomUUID().slice(0, 8)}`, password: 'wrong-password' }, null, { 'x-forwarded-for': junk });
  expect([r.status, r.body?.error?.code]).toEqual([401, 'invalid_credentials']);
}, 30_000);
