/**
 * The alert outbox is pruned: delivered alerts ALERT_OUTBOX_RETENTION_DAYS after their delivery and skipped ones
 * as long after they were written go; pending and failed ones stay, as do the alert caps of current periods (a
 * pruned outbox must not reopen a cap). Before, every alert stayed forever.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startGateway({ ALERT_OUTBOX_RETENTION_DAYS: '1', ALERT_OUTBOX_PRUNE_MS: '200' });
}, 120_000);
afterAll(async () => { await gw.stop(); }, 30_000);

test('delivered and skipped alerts older than the retention go; pending, failed and recent ones and current caps stay', async () => {
  const now = Date.now();
  const day = 86_400_000;
  const rows: Array<[string, string, number, number | null]> = [
    // event id, status, created_at (s), delivered_at (ms)
    ['evt_old_delivered', 'delivered', Math.floor((now - 3 * day) / 1000), now - 2 * day],
    ['evt_new_delivered', 'delivered', Math.floor((now - 3 * day) / 1000), now - 3_600_000],
    ['evt_old_skipped', 'skipped', Math.floor((now - 2 * day) / 1000), null],
    ['evt_new_skipped', 'skipped', Math.floor((now - 3_600_000) / 1000), null],
    ['evt_old_pending', 'pending', Math.floor((now - 5 * day) / 1000), null],
    ['evt_old_failed', 'failed', Math.floor((now - 5 * day) / 1000), null],
  ];
  await gw.db.all("insert into alert_caps (cap_key, period_key, n, expires_at) values ('low:1:daily', '2000-01-01', 9, ?), ('low:2:daily', '2999-01-01', 9, ?)", now - day, now + day);
  for (const [id, status, createdAt, deliveredAt] of rows) {
    await gw.db.all(`insert into alert_outbox (event_id, type, payload, status, attempts, next_attempt_at, last_error, created_at, delivered_at)
      values (?, 'balance.low', '{}', ?, 1, ?, '', ?, ?)`, id, status, now + 10 * day, createdAt, deliveredAt);
  }
  const ids = async () => (await gw.db.all('select event_id from alert_outbox order by event_id')).map((r) => r.event_id);
  const caps = async () => (await gw.db.all('select cap_key from alert_caps')).map((r) => r.cap_key);
  for (let t = 0; ((await ids()).length > 4 || (await caps()).length > 1) && t < 100; t++) await Bun.sleep(100);
  expect(await ids()).toEqual(['evt_new_delivered', 'evt_new_skipped', 'evt_old_failed', 'evt_old_pending']);
  expect(await caps()).toEqual(['low:2:daily']);
}, 30_000);
