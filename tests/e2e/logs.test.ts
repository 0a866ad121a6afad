import { afterAll, beforeAll, expect, test } from 'bun:test';
import { mkdtempSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { openDatabase } from '@gw/db';
import { join } from 'node:path';
import { ON_PG, startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, upstream, type Scripted, keyedUser, msg, send, setPrice } from './relay-setup';

let gw: TestGateway;
let up: Scripted;
beforeAll(async () => {
  gw = await startGateway();
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['l1', 'l2'], mapping: { l2: 'l2-up' } });
  await setPrice(gw, 'l1');
  await setPrice(gw, 'l2');
});
afterAll(async () => { await up.stop(); await gw.stop(); });

test('admins list all logs with filters and paging; users only their own', async () => {
  const a = await keyedUser(gw);
  const b = await keyedUser(gw);
  for (let i = 0; i < 3; i++) expect((await send(gw, a.key, msg('l1'))).status).toBe(200);
  expect((await send(gw, a.key, msg('l2', { stream: true }))).status).toBe(200);
  up.queue.push({ error: { status: 500 } });
  expect((await send(gw, b.key, msg('l1'))).status).toBe(502);

  const all = await gw.api('GET', '/api/log/?page_size=2&p=1');
  expect(all.body.data).toMatchObject({ total: 5, page: 1, page_size: 2 });
  expect(all.body.data.items).toHaveLength(2);
  const byUser = await gw.api('GET', `/api/log/?user_id=${a.id}&model=l2`);
  expect(byUser.body.data.total).toBe(1);
  expect(byUser.body.data.items[0]).toMatchObject({ model: 'l2', upstream_model: 'l2-up', stream: true, user_id: a.id, api_key_id: a.keyId, status: 200, attempts: 1 });
  expect(byUser.body.data.items[0].channel_id).toBeGreaterThan(0);
  expect((await gw.api('GET', `/api/log/?token_id=${b.keyId}`)).body.data.total).toBe(1);
  expect((await gw.api('GET', '/api/log/?status=502')).body.data.items[0]).toMatchObject({ user_id: b.id, cost: 0, error_code: 'upstream_error' });
  const now = Math.floor(Date.now() / 1000);
  expect((await gw.api('GET', `/api/log/?start_timestamp=${now + 100}`)).body.data.total).toBe(0);
  expect((await gw.api('GET', `/api/log/?start_timestamp=${now - 100}&end_timestamp=${now + 100}`)).body.data.total).toBe(5);

  const mine = await gw.api('GET', '/api/log/self', undefined, b.token);
  expect(mine.body.data.total).toBe(1);
  expect(mine.body.data.items[0]).toMatchObject({ user_id: b.id, channel_id: null, upstream_model: '' });
  // A user cannot read all logs, nor filter themselves into another user's.
  expect((await gw.api('GET', '/api/log/', undefined, b.token)).status).toBe(403);
  expect((await gw.api('GET', `/api/log/self?user_id=${a.id}`, undefined, b.token)).body.data.total).toBe(1);
});

test('a listing right after a response sees its request, in the logs and in the ledger', async () => {
  // On SQLite the listings run on the history worker's own connection: the settlement batch is committed when the
  // management request arrives (it flushes first), so the worker's next read transaction sees it.
  const u = await keyedUser(gw);
  for (let i = 1; i <= 8; i++) {
    const res = await send(gw, u.key, msg('l1'));
    expect(res.status).toBe(200);
    const logs = (await gw.api('GET', '/api/log/self?page_size=1', undefined, u.token)).body.data;
    expect(logs.total).toBe(i);
    expect(logs.items[0].request_id).toBe(res.headers.get('request-id'));
    const charges = (await gw.api('GET', '/api/ledger/self?kind=charge&page_size=1', undefined, u.token)).body.data;
    expect(charges.total).toBe(i);
    expect((await gw.api('GET', `/api/log/?user_id=${u.id}&page_size=1`)).body.data.total).toBe(i);
  }
});

// SQLite only: the history worker opens the database file by its path.
test.skipIf(ON_PG)('a history worker that cannot open the database answers 503 JSON and gives the slot back', async () => {
  const g = await startGateway();
  try {
    const file = join(g.dir, 'gateway.db');
    // The gateway's own connection keeps its open file; the worker, started on the first listing, finds no file.
    renameSync(file, `${file}.away`);
    for (const path of ['/api/log/?page_size=1', '/api/ledger/?page_size=1']) {
      const r = await g.api('GET', path);
      expect(r.status).toBe(503);
      expect(r.body.error).toMatchObject({ code: 'history_unavailable' });
      expect(r.headers.get('retry-after')).toBe('1');
    }
    renameSync(`${file}.away`, file);
    // The node-wide slot (one on SQLite) was given back and a new worker starts.
    const ok = await g.api('GET', '/api/ledger/?page_size=1');
    expect(ok.status).toBe(200);
    expect(ok.body.data).toMatchObject({ total: 0, items: [] });
  } finally {
    await g.stop();
  }
}, 20_000);

// SQLite only: the history worker opens the database file by its path.
test.skipIf(ON_PG)('a database file replaced under a running gateway is not listed in place of the one it writes', async () => {
  const g = await startGateway();
  try {
    // Another database, with a ledger row of a user this gateway never had, is moved to the gateway's path; the
    // gateway's own connection still writes the old file.
    const otherDir = mkdtempSync(join(tmpdir(), 'gw-other-'));
    const other = openDatabase(join(otherDir, 'o.db'), { checkpointMs: 0 });
    other.sqlite.exec(`PRAGMA foreign_keys = OFF; INSERT INTO ledger (user_id, kind, amount, balance_after, ref, created_at) VALUES (424242, 'topup', 5, 5, 'x', 1)`);
    other.close();
    const file = join(g.dir, 'gateway.db');
    renameSync(file, `${file}.old`);
    renameSync(join(otherDir, 'o.db'), file);
    const r = await g.api('GET', '/api/ledger/?user_id=424242&page_size=1');
    expect(r.status).toBe(503);
    expect(r.body.error).toMatchObject({ code: 'history_unavailable' });
    rmSync(otherDir, { recursive: true, force: true });
  } finally {
    await g.stop();
  }
}, 20_000);
