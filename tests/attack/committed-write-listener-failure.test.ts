/**
 * A management write that commits but whose local cache refresh fails (a listener on the change bus throws or its
 * re-read is refused, as a PostgreSQL pool at its connection limit does) used to answer 500: the client, told it
 * failed, retries a change that is already made (a second user or key created, a 409 on the name). Now the route
 * answers the committed result, the failure is logged, and every cache is reloaded in full (the change feed's
 * resync, retried until it works), so the change still reaches the cache that missed it.
 */
import { afterEach, beforeEach, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { keyedUser, nodeOne } from '../e2e/relay-setup';

// Node 1 is addressed (nodeOne): its services are the ones made to fail. A gateway each: the repairs' wait doubles while failures come close together (RepairBackoff), so one test's
// failures would delay the next test's repair.
let gw: TestGateway;
beforeEach(async () => { gw = await startGateway(); }, 30_000);
afterEach(async () => { await gw.stop(); }, 30_000);

test('a committed write answers success although a cache refresh failed, and the caches are resynced', async () => {
  const u = await makeUser(gw, 1);
  const dir = gw.services.userDirectory as unknown as { reloadAll: () => Promise<void> };
  const reloadAll = dir.reloadAll.bind(dir);
  let resyncs = 0;
  dir.reloadAll = () => { resyncs++; return reloadAll(); };
  // Refreshes of users fail until the write has answered, like re-reads refused by the database (PostgreSQL:
  // the change feed's copy of the change as well as the write's own).
  let failures = 0;
  let failing = true;
  const off = gw.services.bus.on('user.changed', () => {
    if (!failing) return;
    failures++;
    throw new Error('sorry, too many clients already (test)');
  });
  try {
    const r = await nodeOne(gw).api('POST', `/api/user/${u.id}/disable`);
    failing = false;
    expect([r.status, r.body.data?.status]).toEqual([200, 2]);
    expect(failures).toBeGreaterThan(0);
    expect((await gw.services.users.byId(u.id))?.status).toBe(2);
    const deadline = Date.now() + 5_000;
    while (resyncs === 0 && Date.now() < deadline) await Bun.sleep(20);
    expect(resyncs).toBeGreaterThan(0);
    expect(gw.logs.some((l) => l.includes('change.refresh_failed'))).toBe(true);
    // The directory holds the committed state; the user's session no longer works.
    expect(gw.services.userDirectory.get(u.id)?.status).toBe(2);
    expect((await nodeOne(gw).api('GET', '/api/user/self', undefined, u.token)).status).toBe(401);
  } finally {
    off();
    dir.reloadAll = reloadAll;
  }
}, 20_000);

/**
 * Budgets and groups refresh their in-memory books directly after a write (no bus listener): a reload that fails
 * there answered 500 although the row was written, so a client retried a change already made. `fail` makes the
 * book's reload throw until the write has answered; the resync that follows must install the committed state.
 */
async function reloadFailsOnce<T>(book: Record<string, unknown>, method: string, write: () => Promise<T>): Promise<{ answer: T; failures: number }> {
  const real = (book[method] as () => unknown).bind(book);
  let failing = true;
  let failures = 0;
  book[method] = () => {
    if (!failing) return real();
    failures++;
    throw new Error('sorry, too many clients already (test)');
  };
  try {
    const answer = await write();
    failing = false;
    return { answer, failures };
  } finally {
    failing = false;
    book[method] = real;
  }
}

async function until(check: () => boolean, ms = 5_000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (!check() && Date.now() < deadline) await Bun.sleep(20);
  return check();
}

test('a committed budget write answers success although the budget book reload failed, and a resync installs it', async () => {
  const u = await keyedUser(gw);
  const book = gw.services.relay.budgets;
  const { answer: r, failures } = await reloadFailsOnce(book as never, 'reload',
    () => nodeOne(gw).api('PUT', '/api/budget/', { scope: 'user', subject_id: u.id, period: 'daily', limit: 500 }));
  expect([r.status, r.body.data?.limit]).toEqual([200, 500]);
  expect(failures).toBeGreaterThan(0);
  expect(gw.logs.some((l) => l.includes('change.refresh_failed') && l.includes('budget.changed'))).toBe(true);
  expect(await until(() => book.budgetIds(u.id, 0).includes(r.body.data.id))).toBe(true);
  // Clearing it: the same.
  const { answer: d } = await reloadFailsOnce(book as never, 'reload', () => nodeOne(gw).api('DELETE', `/api/budget/${r.body.data.id}`));
  expect(d.status).toBe(200);
  expect(await until(() => !book.budgetIds(u.id, 0).includes(r.body.data.id))).toBe(true);
  const { answer: low } = await reloadFailsOnce(book as never, 'reload', () => nodeOne(gw).api('PUT', '/api/budget/low_balance', { user_id: u.id, threshold: 100 }));
  expect([low.status, low.body.data?.low_balance_threshold]).toEqual([200, 100]);
}, 20_000);

test('a committed group write answers success although the group reload failed, and a resync installs it', async () => {
  const groups = gw.services.relay.groups;
  const repo = (groups as unknown as { repo: Record<string, unknown> }).repo;
  const name = `reload-fail-${Date.now()}`;
  const { answer: c, failures } = await reloadFailsOnce(repo, 'all', () => nodeOne(gw).api('POST', '/api/group/', { name, ratio: 1500 }));
  expect([c.status, c.body.data?.ratio]).toEqual([200, 1500]);
  expect(failures).toBeGreaterThan(0);
  expect(await until(() => groups.policy(name).ratio === 1500)).toBe(true);
  // A retry of the create is now the 409 of a group that exists, not a second one.
  expect((await nodeOne(gw).api('POST', '/api/group/', { name, ratio: 1500 })).status).toBe(409);
  const { answer: u } = await reloadFailsOnce(repo, 'all', () => nodeOne(gw).api('PUT', '/api/group/', { id: c.body.data.id, ratio: 2000 }));
  expect([u.status, u.body.data?.ratio]).toEqual([200, 2000]);
  expect(await until(() => groups.policy(name).ratio === 2000)).toBe(true);
  const { answer: d } = await reloadFailsOnce(repo, 'all', () => nodeOne(gw).api('DELETE', `/api/group/${c.body.data.id}`));
  expect(d.status).toBe(200);
  expect(await until(() => groups.policy(name).ratio === 1000)).toBe(true);
}, 20_000);

/**
 * Every settled request of a limited key re-reads the key's row in the background (settlement's cache refresh);
 * a failure there goes to the same repairs. A re-read that keeps failing while the whole reload gets through (a
 * database shedding load) must not make every settled request one more full reload of every cache: the repairs
 * wait between them (0.25 s, doubling), as a failed resync's retries do.
 */
test('settlement refreshes that keep failing do not reload every cache once per request', async () => {
  const { upstream, addChannel, setPrice, send, msg } = await import('../e2e/relay-setup');
  const up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['storm-model'], name: 'storm' });
  await setPrice(gw, 'storm-model');
  const u = await keyedUser(gw, 1_000_000_000, { unlimited_quota: false, remain_quota: 100_000_000 });
  const dir = gw.services.userDirectory as unknown as { reloadAll: () => Promise<void> };
  const reloadAll = dir.reloadAll.bind(dir);
  let resyncs = 0;
  dir.reloadAll = () => { resyncs++; return reloadAll(); };
  let failures = 0;
  const off = gw.services.bus.on('apikey.changed', () => {
    failures++;
    throw new Error('sorry, too many clients already (test)');
  });
  try {
    const started = Date.now();
    // Spaced past the settlement batch's 5 ms, so each request's refresh fails on its own (back to back, a fast
    // machine put the 40 in 4 batches: too few failures to be a storm).
    for (let i = 0; i < 40; i++) {
      expect((await send(nodeOne(gw), u.key, msg('storm-model'))).status).toBe(200);
      await Bun.sleep(6);
    }
    await Bun.sleep(300);
    const elapsed = Date.now() - started;
    console.log(`settlement refresh failures ${failures}, full reloads ${resyncs} in ${elapsed} ms`);
    expect(failures).toBeGreaterThanOrEqual(5);
    // 0.25 s, 0.5 s, 1 s, ... apart: a handful over the run, not one per request.
    expect(resyncs).toBeLessThanOrEqual(2 + Math.log2(elapsed / 250 + 1));
    // And the log has a line per reload due, not one per failure (error lines with a stack each).
    const lines = gw.logs.filter((l) => l.includes('change.refresh_failed')).length;
    console.log(`change.refresh_failed lines: ${lines}`);
    expect(lines).toBeLessThanOrEqual(2 + Math.log2(elapsed / 250 + 1));
  } finally {
    off();
    dir.reloadAll = reloadAll;
    await up.stop();
  }
}, 30_000);
