/**
 * Usage statistics are history reads like the listings: they take the node-wide history slot, are served in turn by
 * caller, and beyond the node's waiting bound are refused at once (503 `history_busy`), instead of queueing without
 * bound on a statistics worker of their own beside the listings'. Over real HTTP on a node with 200,000 rows.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { seedGatewayUsageRows } from '../helpers/usage-seed';

const QUEUE = 5;
const FROM = Date.UTC(2026, 0, 1) / 1000;
const SPAN = 30 * 86_400;
let gw: TestGateway;
let alice: { id: number; token: string };
let bob: { id: number; token: string };

beforeAll(async () => {
  gw = await startGateway({ HISTORY_READS_QUEUE: String(QUEUE) });
  alice = await makeUser(gw);
  bob = await makeUser(gw);
  await seedGatewayUsageRows(gw.services, { rows: 200_000, from: FROM, spanSeconds: SPAN, users: 2 });
  if (!gw.services.dbh) await gw.db.all('vacuum analyze usage_logs');
}, 120_000);
afterAll(async () => { await gw.stop(); });

// Every seeded row by day and model: a few hundred ms of aggregate.
const heavy = `/api/log/stats?start_timestamp=${FROM}&end_timestamp=${FROM + SPAN}&group_by=model`;
const get = (path: string, token: string) => fetch(gw.nodeUrl + path, { headers: { authorization: `Bearer ${token}` } })
  .then(async (res) => ({ status: res.status, body: await res.json() as any }));

test("a second caller's statistics run before the first caller's queued statistics have all run", async () => {
  const admin = await makeUser(gw, 10);
  const gate = gw.services.historyReads;
  const done: string[] = [];
  const read = (who: string, path: string, token: string) => get(path, token).then((r) => { expect(r.status).toBe(200); done.push(who); });
  const backlog = Array.from({ length: 4 }, (_, i) => read(`admin${i}`, heavy, admin.token));
  const deadline = Date.now() + 10_000;
  while (gate.heldBy(admin.id) < 4 && Date.now() < deadline) await Bun.sleep(0);
  expect(gate.heldBy(admin.id)).toBe(4);
  // Queued in the node's slot, not only counted against the caller's share.
  expect(gate.load.running + gate.load.waiting).toBeGreaterThanOrEqual(3);
  const bobs = read('bob', `/api/log/stats/self?start_timestamp=${FROM}&end_timestamp=${FROM + SPAN}`, bob.token);
  await Promise.all([...backlog, bobs]);
  console.log(`completion order: ${done.join(' ')}`);
  expect(done.indexOf('bob')).toBeLessThan(4);
}, 60_000);

test('statistics beyond the node-wide waiting bound are refused at once with 503 history_busy', async () => {
  const admins = await Promise.all(Array.from({ length: 8 }, () => makeUser(gw, 10)));
  const gate = gw.services.historyReads;
  let maxRunning = 0;
  let polling = true;
  const poll = (async () => { while (polling) { maxRunning = Math.max(maxRunning, gate.load.running); await Bun.sleep(1); } })();
  const results = await Promise.all(admins.map((a) => get(heavy, a.token)));
  polling = false;
  await poll;
  const busy = results.filter((r) => r.status === 503);
  console.log(`statuses: ${results.map((r) => r.status).join(' ')}; most running at once: ${maxRunning}`);
  // 8 callers, one read each: no caller's share is full, the node's slots and queue are.
  expect(busy.length).toBeGreaterThan(0);
  for (const r of busy) expect(r.body).toMatchObject({ success: false, error: { code: 'history_busy' } });
  expect(results.filter((r) => r.status === 200).length).toBeGreaterThanOrEqual(QUEUE + 1);
  expect(maxRunning).toBeLessThanOrEqual(gw.services.dbh ? 1 : 2);
  // Refusals hold nothing: the node serves the next one.
  expect((await get(heavy, admins[0]!.token)).status).toBe(200);
}, 60_000);
