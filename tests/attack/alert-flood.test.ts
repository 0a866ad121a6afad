/**
 * Attack: a key's owner floods the operator's alert webhook. Key budgets are the owner's to set and
 * clear, and a new budget starts a period afresh, so "clear, set a tiny budget, spend one request" repeats
 * 50/80/100 % for next to nothing; so does lowering the limit just under the spend and raising it again.
 * The outbox (and the single delivery worker behind it) must not grow with that: each budget subject
 * gets a bounded number of threshold alerts per period, the rest is logged as suppressed. Nor may a set
 * racing charges make a threshold announced twice.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { CLUSTER_NODES, startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfUtcDayEnd } from '../helpers/window-edge';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

// Runs on either backend, and through 3 nodes (GW_TEST_BACKEND=pg GW_TEST_CLUSTER=3): the alert counts it bounds are
// kept in the database, so the nodes share them (counted per node, 3 nodes wrote 27 threshold alerts and 20 low-balance ones).
let gw: TestGateway;
let up: Scripted;
beforeAll(async () => {
  // "This period" is a UTC day: a new one would allow another set of alerts (see clearOfUtcDayEnd).
  await clearOfUtcDayEnd(300_000);
  gw = await startGateway({ BILLING_FLUSH_MS: '1' });
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['m'] });
  // 1 unit per 1,000 tokens: a request's worst case is a few units.
  await setPrice(gw, 'm', { input: 1000, output: 1000 });
}, 400_000);
afterAll(async () => { await up.stop(); await gw.stop(); }, 120_000);

const thresholdAlerts = async (keyId: number) => (await gw.db.all("select payload from alert_outbox where type = 'budget.threshold' order by id"))
  .map((r) => JSON.parse(r.payload).data).filter((d) => d.key_id === keyId);

test('20 rounds of clear / set / spend on one key write at most 9 threshold alerts this period', async () => {
  const u = await keyedUser(gw, 1e9);
  for (let i = 0; i < 20; i++) {
    const list = await gw.api('GET', '/api/budget/self', undefined, u.token);
    for (const b of list.body.data.budgets) await gw.api('DELETE', `/api/budget/${b.id}`, undefined, u.token);
    expect((await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: u.keyId, period: 'daily', limit: 5 }, u.token)).status).toBe(200);
    up.queue.push({ text: 'ok', usage: { input: 5000, output: 0 } });
    expect((await send(gw, u.key, { ...msg('m'), max_tokens: 1, messages: [{ role: 'user', content: 'word '.repeat(1200) }] })).status).toBe(200);
  }
  const alerts = await thresholdAlerts(u.keyId);
  expect(alerts.length).toBeGreaterThanOrEqual(3);
  expect(alerts.length).toBeLessThanOrEqual(9);
  // The suppression is logged by the node that settled the charge (`gw.logs`: node 1's).
  if (CLUSTER_NODES === 1) expect(gw.logs.some((l) => l.includes('alert.suppressed'))).toBe(true);
  // Another key of the same user still gets its own alerts.
  const second = await gw.api('POST', '/api/token/', { name: 'k2' }, u.token);
  await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: second.body.data.id, period: 'daily', limit: 5 }, u.token);
  up.queue.push({ text: 'ok', usage: { input: 5000, output: 0 } });
  expect((await send(gw, second.body.data.key, { ...msg('m'), max_tokens: 1, messages: [{ role: 'user', content: 'word '.repeat(1200) }] })).status).toBe(200);
  expect((await thresholdAlerts(second.body.data.id)).map((d) => d.threshold)).toEqual([50, 80, 100]);
}, 120_000);

test('20 rounds of "set my low-balance threshold to my balance, spend" write at most 9 low-balance alerts this period', async () => {
  // A user sets its own threshold at will, so each round re-arms it just under the current balance for one cheap request.
  const u = await keyedUser(gw, 1e9);
  const balance = async () => Number((await gw.db.all('select quota from users where id = ?', u.id))[0].quota);
  for (let i = 0; i < 20; i++) {
    const before = await balance();
    expect((await gw.api('PUT', '/api/budget/low_balance', { threshold: before }, u.token)).status).toBe(200);
    up.queue.push({ text: 'ok', usage: { input: 5000, output: 0 } });
    expect((await send(gw, u.key, { ...msg('m'), max_tokens: 1 })).status).toBe(200);
    // The charge commits within BILLING_FLUSH_MS; the next round's threshold is the balance it left.
    for (let t = 0; (await balance()) === before && t < 200; t++) await Bun.sleep(5);
  }
  const low = (await gw.db.all("select payload from alert_outbox where type = 'balance.low' order by id")).map((r) => JSON.parse(r.payload).data).filter((d) => d.user_id === u.id);
  expect(low.length).toBeGreaterThanOrEqual(3);
  expect(low.length).toBeLessThanOrEqual(9);
  if (CLUSTER_NODES === 1) expect(gw.logs.some((l) => l.includes('alert.suppressed') && l.includes('balance.low'))).toBe(true);
}, 120_000);

test('15 rounds of new key / tiny budget / spend / delete key write at most 30 key-budget alerts for the owner this period', async () => {
  // Each new key is a new budget subject with its own 9; rotating keys must not make the owner's share unbounded.
  const u = await keyedUser(gw, 1e9);
  for (let i = 0; i < 15; i++) {
    const k = await gw.api('POST', '/api/token/', { name: `rot${i}` }, u.token);
    expect(k.status).toBe(200);
    expect((await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: k.body.data.id, period: 'daily', limit: 5 }, u.token)).status).toBe(200);
    up.queue.push({ text: 'ok', usage: { input: 5000, output: 0 } });
    expect((await send(gw, k.body.data.key, { ...msg('m'), max_tokens: 1, messages: [{ role: 'user', content: 'word '.repeat(1200) }] })).status).toBe(200);
    // The charge (and its alerts) commits within BILLING_FLUSH_MS, before the key and its budget go.
    for (let t = 0; !(await gw.db.all('select 1 from usage_logs where api_key_id = ?', k.body.data.id)).length && t < 200; t++) await Bun.sleep(5);
    expect((await gw.api('DELETE', `/api/token/${k.body.data.id}`, undefined, u.token)).status).toBe(200);
  }
  const alerts = (await gw.db.all("select payload from alert_outbox where type = 'budget.threshold' order by id")).map((r) => JSON.parse(r.payload).data)
    .filter((d) => d.user_id === u.id && d.scope === 'key');
  expect(alerts.length).toBeGreaterThanOrEqual(9);
  expect(alerts.length).toBeLessThanOrEqual(30);
}, 120_000);

// A budget set again while charges commit against it recomputes which thresholds are announced from the spend it
// read; a charge that crossed one and marked it in between must not be unmarked, or the next charge announces it again.
test('a budget re-set with the same limit while 60 charges cross its thresholds announces each threshold once', async () => {
  const u = await keyedUser(gw, 1e9);
  const limit = 60 * 200;
  const set = () => gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: u.id, period: 'daily', limit });
  expect((await set()).status).toBe(200);
  up.fallback = { text: 'ok', usage: { input: 200_000, output: 0 } }; // 200 units
  let done = false;
  const setter = (async () => { while (!done) expect((await set()).status).toBe(200); })();
  for (let i = 0; i < 15; i++) {
    const rs = await Promise.all(Array.from({ length: 4 }, () => send(gw, u.key, { ...msg('m'), max_tokens: 100 })));
    expect(rs.map((r) => r.status)).toEqual([200, 200, 200, 200]);
  }
  done = true;
  await setter;
  up.fallback = { text: 'Hello there' };
  await Bun.sleep(100);
  const alerts = (await gw.db.all("select payload from alert_outbox where type = 'budget.threshold' order by id")).map((r) => JSON.parse(r.payload).data)
    .filter((d) => d.user_id === u.id && d.scope === 'user');
  expect(alerts.map((d) => d.threshold)).toEqual([50, 80, 100]);
}, 120_000);
