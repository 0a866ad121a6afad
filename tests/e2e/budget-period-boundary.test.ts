/**
 * A charge counts in exactly one budget period. Around UTC midnight a charge of the old day can commit after
 * the budget already counts the new one: another node whose clock is ahead, or a later request whose commit
 * overtook it (PostgreSQL: a charge above its hold waits for the shared store before it is queued). Such a
 * charge was counted in neither day: the old day's spend was already replaced by the new day's, and the
 * charge's write skipped a budget in a later period. The boundary is forced here by moving the budget's
 * stored period a day ahead, which is what the overtaking commit leaves behind.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfUtcDayEnd } from '../helpers/window-edge';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
let up: Scripted;
beforeAll(async () => {
  await clearOfUtcDayEnd(60_000);
  gw = await startGateway({ BILLING_FLUSH_MS: '1' });
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['m'] });
  await setPrice(gw, 'm', { input: 1_000_000, output: 1_000_000 });
}, 120_000);
afterAll(async () => { await up.stop(); await gw.stop(); }, 30_000);

const tomorrow = () => new Date(Date.now() + 86_400_000).toISOString().slice(0, 10);

test('a charge committed after its budget moved to the next day counts in that day, not in none', async () => {
  const u = await keyedUser(gw, 100_000_000);
  const set = await gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: u.id, period: 'daily', limit: 1_000_000 });
  expect(set.status).toBe(200);
  // What a first charge of tomorrow, committed first, leaves: the budget counts tomorrow, 7 spent.
  const next = tomorrow();
  await gw.db.all('update budgets set period_key = ?, spent = 7 where id = ?', next, set.body.data.id);
  up.queue.push({ text: 'ok', usage: { input: 300, output: 20 } });
  expect((await send(gw, u.key, msg('m'))).status).toBe(200);
  const cost = async () => Number((await gw.db.get('select coalesce(sum(cost), 0) as s from usage_logs where user_id = ?', u.id)).s);
  for (let t = 0; (await cost()) === 0 && t < 200; t++) await Bun.sleep(10);
  expect(await cost()).toBe(320);
  const row = await gw.db.get('select period_key, spent from budgets where id = ?', set.body.data.id);
  expect({ periodKey: row.period_key, spent: Number(row.spent) }).toEqual({ periodKey: next, spent: 7 + 320 });
}, 30_000);
