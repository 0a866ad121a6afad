/**
 * Every history query runs under a time limit (HISTORY_QUERY_TIMEOUT_MS): past it the query is stopped (SQLite: its
 * child process is killed, bun:sqlite having no interrupt; PostgreSQL: statement_timeout) and answered 503
 * `history_timeout`, its slot given back. Before, a wide aggregate held the history worker for as long as it ran.
 * Over real HTTP on 200,000 rows, with a limit far below what the widest statistics query takes.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { seedGatewayUsageRows } from '../helpers/usage-seed';

const FROM = Date.UTC(2026, 0, 1) / 1000;
const SPAN = 30 * 86_400;
const LIMIT_MS = 250;
let gw: TestGateway;

beforeAll(async () => {
  gw = await startGateway({ HISTORY_QUERY_TIMEOUT_MS: String(LIMIT_MS) });
  await seedGatewayUsageRows(gw.services, { rows: 200_000, from: FROM, spanSeconds: SPAN, users: 2 });
  if (!gw.services.dbh) await gw.db.all('vacuum analyze usage_logs');
}, 120_000);
afterAll(async () => { await gw.stop(); });

const get = async (path: string, token = gw.rootToken) => {
  const t = performance.now();
  const res = await fetch(gw.nodeUrl + path, { headers: { authorization: `Bearer ${token}` } });
  return { status: res.status, body: await res.json() as any, headers: res.headers, ms: performance.now() - t };
};

test('a statistics query past the time limit is stopped and answered 503 history_timeout; the next read is served', async () => {
  const bob = await makeUser(gw);
  // Warm the reader (a SQLite child process starts on first use; its start is not charged to the query).
  expect((await get('/api/log/self', bob.token)).status).toBe(200);
  // Every seeded row, hourly by key: seconds of aggregate on either backend.
  const wide = await get(`/api/log/stats?start_timestamp=${FROM}&end_timestamp=${FROM + 29 * 86_400}&granularity=hour&group_by=key`);
  console.log(`wide statistics: ${wide.status} in ${wide.ms.toFixed(0)} ms`);
  expect(wide.status).toBe(503);
  expect(wide.body).toMatchObject({ success: false, error: { code: 'history_timeout' } });
  expect(wide.body.error.message).toContain('HISTORY_QUERY_TIMEOUT_MS');
  expect(wide.headers.get('retry-after')).toBe('1');
  // Answered near the limit, not when the query would have ended.
  expect(wide.ms).toBeLessThan(LIMIT_MS + 2_000);
  // The slot was given back and the reader is usable: a small read right after is served.
  expect(gw.services.historyReads.heldBy(1)).toBe(0);
  const small = await get('/api/log/self?page_size=5', bob.token);
  expect(small.status).toBe(200);
  expect(small.body.data.items.length).toBeGreaterThan(0);
  const narrow = await get(`/api/log/stats/self?start_timestamp=${FROM}&end_timestamp=${FROM + 3600}`, bob.token);
  expect(narrow.status).toBe(200);
}, 60_000);

test('a caller whose query timed out is paused (429, retry-after), longer for each timeout in a row; other callers are not', async () => {
  const bob = await makeUser(gw);
  const wideStats = `/api/log/stats?start_timestamp=${FROM}&end_timestamp=${FROM + 29 * 86_400}&granularity=hour&group_by=key`;
  // The ledger: small here, unlike the usage log's count over every seeded row (past the limit on PostgreSQL).
  const cheap = '/api/ledger/self';
  await Bun.sleep(1_100);
  // A completed read ends any run left by the test before.
  expect((await get(cheap)).status).toBe(200);
  expect((await get(wideStats)).status).toBe(503);
  // Repeating it at once (or anything else of the history) is refused without touching the database.
  const paused = await get(cheap);
  expect(paused.status).toBe(429);
  expect(paused.body).toMatchObject({ success: false, error: { code: 'too_many_requests' } });
  expect(paused.headers.get('retry-after')).toBe('1');
  expect((await get(wideStats)).status).toBe(429);
  expect((await get('/api/log/self?page_size=5', bob.token)).status).toBe(200);
  // After the 1 s pause the repeat runs, times out again, and the pause doubles.
  await Bun.sleep(1_100);
  expect((await get(wideStats)).status).toBe(503);
  const second = await get(cheap);
  expect(second.status).toBe(429);
  expect(second.headers.get('retry-after')).toBe('2');
  await Bun.sleep(1_100);
  expect((await get(cheap)).status).toBe(429);
  await Bun.sleep(1_000);
  // A completed read ends the run: the next timeout pauses 1 s again.
  expect((await get(cheap)).status).toBe(200);
  expect((await get(wideStats)).status).toBe(503);
  expect((await get(cheap)).headers.get('retry-after')).toBe('1');
}, 60_000);
