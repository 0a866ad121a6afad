/**
 * Attack (or just an operator's script): a budget set again while charges commit against it. The set recomputes
 * which thresholds are already announced from the spend it read; a charge that crossed one and marked it between
 * that read and the write must not be unmarked, or the next charge announces the same threshold again.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfUtcDayEnd } from '../helpers/window-edge';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let up: Scripted;

beforeAll(async () => {
  // Thresholds are announced once per UTC day of a daily budget: the whole run in one (see clearOfUtcDayEnd).
  await clearOfUtcDayEnd(60_000);
  gw = await startGateway({ BILLING_FLUSH_MS: '1' });
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['m'] });
  await setPrice(gw, 'm', { input: 1_000_000, output: 1_000_000 });
}, 100_000);
afterAll(async () => { await up.stop(); await gw.stop(); }, 30_000);

test('a budget re-set with the same limit while 60 charges cross its thresholds announces each threshold once', async () => {
  const u = await keyedUser(gw, 1e9);
  const limit = 60 * 200;
  const set = () => gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: u.id, period: 'daily', limit });
  expect((await set()).status).toBe(200);
  up.fallback = { text: 'ok', usage: { input: 100, output: 100 } };
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
}, 60_000);
