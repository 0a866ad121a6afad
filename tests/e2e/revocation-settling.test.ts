/**
 * PostgreSQL mode: a failed request's usage row is committed before the client is answered, so a revocation can
 * land after the request ended (its row already says how) and before its answer left. The answer must then be
 * what the row says, not the revocation that came too late to stop anything. The group commit is held for up to
 * a second here (PG_SETTLE_FLUSH_MS), which makes that gap wide enough to revoke in.
 * PostgreSQL only: SQLite mode journals the row synchronously (no gap).
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { ON_PG, startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, setPrice, upstream, V, type Scripted } from './relay-setup';

let gw: TestGateway;
let up: Scripted;
beforeAll(async () => {
  if (!ON_PG) return;
  gw = await startGateway({ PG_SETTLE_FLUSH_MS: '1000', RELAY_MAX_ATTEMPTS: '1', RELAY_HEALTH_FAILURES: '100', RELAY_PROBE_INTERVAL_MS: '3600000' });
  up = upstream('anthropic', { error: { status: 500, message: 'upstream broke' } });
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['settling-m'] });
  await setPrice(gw, 'settling-m');
}, 30_000);
afterAll(async () => {
  await up?.stop();
  await gw?.stop();
});

test.skipIf(!ON_PG)('revoked while a failed request\'s row is being committed: the answer is what the row says', async () => {
  const u = await keyedUser(gw);
  const pending = fetch(`${gw.nodeUrl}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': u.key, ...V }, body: JSON.stringify(msg('settling-m')) });
  for (let i = 0; i < 200 && up.hits < 1; i++) await Bun.sleep(5);
  expect(up.hits).toBe(1);
  // The upstream's 500 is judged, and the row waits for the group commit.
  await Bun.sleep(150);
  expect((await gw.nodeApi('DELETE', `/api/token/${u.keyId}`, undefined, u.token)).status).toBe(200);
  const res = await pending;
  const body = (await res.json()) as any;
  let row: any;
  for (let i = 0; i < 100 && !row; i++) {
    row = (await gw.db.all('select status, error_code from usage_logs where user_id = ?', u.id))[0];
    if (!row) await Bun.sleep(20);
  }
  expect(row.error_code).not.toBe('api_key_revoked');
  expect([res.status, body.error.code]).toEqual([row.status, row.error_code]);
}, 30_000);
