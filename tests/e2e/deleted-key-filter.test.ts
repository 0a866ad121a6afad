/**
 * A usage-log filter by a deleted key's id: the key index in memory no longer knows its owner, so the query had only
 * `api_key_id = ?`, which no index serves, and scanned every row of usage_logs. The history reader now looks the
 * owner up (live keys in api_keys, deleted ones in deleted_api_keys, which a trigger fills), so it walks the
 * owner's `(user_id, created_at)` rows like a live key's filter. Over real HTTP (the rows are still listed, counted
 * and summed) and by the database's own plan for the statement the reader runs, on 200,000 other rows.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { and, count } from 'drizzle-orm';
import { logConditions, usageLogs, withKeyOwner, type UsageLogWhere } from '@gw/db';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { seedGatewayUsageRows } from '../helpers/usage-seed';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
let up: Scripted;
let owner: Awaited<ReturnType<typeof keyedUser>>;

beforeAll(async () => {
  gw = await startGateway();
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['dk'] });
  await setPrice(gw, 'dk');
  owner = await keyedUser(gw);
  for (let i = 0; i < 3; i++) expect((await send(gw, owner.key, msg('dk'))).status).toBe(200);
  // Other users' rows (ids 1..50, keys never the owner's): what a scan would walk.
  await seedGatewayUsageRows(gw.services, { rows: 200_000, from: Math.floor(Date.now() / 1000) - 30 * 86_400, spanSeconds: 29 * 86_400, users: 50 });
  if (!gw.services.dbh) await gw.db.all('analyze usage_logs');
  expect((await gw.api('DELETE', `/api/token/${owner.keyId}`, undefined, owner.token)).status).toBe(200);
}, 180_000);
afterAll(async () => { await up.stop(); await gw.stop(); });

test("a deleted key's rows are still listed, exported and summed by its id", async () => {
  const list = await gw.api('GET', `/api/log/?token_id=${owner.keyId}`);
  expect(list.status).toBe(200);
  expect(list.body.data.total).toBe(3);
  expect(list.body.data.items.every((r: any) => r.api_key_id === owner.keyId && r.user_id === owner.id)).toBe(true);
  const stats = await gw.api('GET', `/api/log/stats?token_id=${owner.keyId}&group_by=none`);
  expect(stats.status).toBe(200);
  expect(stats.body.data.items.reduce((n: number, r: any) => n + r.requests, 0)).toBe(3);
  const csv = await fetch(`${gw.url}/api/log/export?token_id=${owner.keyId}`, { headers: { authorization: `Bearer ${gw.rootToken}` } });
  expect((await csv.text()).trim().split('\n')).toHaveLength(4);
  // An id no key ever had matches nothing.
  expect((await gw.api('GET', '/api/log/?token_id=999999')).body.data.total).toBe(0);
}, 30_000);

test("the listing's statement for a deleted key's id is served by an index, not a scan of usage_logs", async () => {
  let plan: string;
  if (gw.services.dbh) {
    // The filter the reader runs: the deleted key's owner found, then the listing's conditions.
    const owned = withKeyOwner(gw.services.dbh.db, { apiKeyId: owner.keyId } as UsageLogWhere);
    expect(owned.userId).toBe(owner.id);
    const where = and(...logConditions(owned));
    const q = gw.services.dbh.db.select({ n: count() }).from(usageLogs).where(where).toSQL();
    const rows = gw.services.dbh.sqlite.query(`explain query plan ${q.sql}`).all(...(q.params as any[])) as { detail: string }[];
    plan = rows.map((r) => r.detail).join('\n');
    expect(plan).toMatch(/SEARCH usage_logs USING (COVERING )?INDEX usage_logs_user_idx \(user_id=\?/);
    expect(plan).not.toMatch(/SCAN usage_logs/);
  } else {
    const { pgSchema, pgLogConditions, pgWithKeyOwner } = await import('@gw/db/pg');
    const pg = gw.services.backend.pg!;
    const owned = await pgWithKeyOwner(pg.db, { apiKeyId: owner.keyId } as UsageLogWhere);
    expect(owned.userId).toBe(owner.id);
    const q = pg.db.select({ n: count() }).from(pgSchema.usageLogs).where(and(...pgLogConditions(owned))).toSQL();
    const rows = await pg.sql.unsafe(`explain ${q.sql}`, q.params as any[]);
    plan = rows.map((r: any) => r['QUERY PLAN']).join('\n');
    expect(plan).toMatch(/Index (Only )?Scan using usage_logs_user_idx on usage_logs|Bitmap Index Scan on usage_logs_user_idx/);
    expect(plan).not.toMatch(/Seq Scan on usage_logs/);
  }
  console.log(plan);
});
