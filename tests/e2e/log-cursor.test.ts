/**
 * Walking the usage logs while requests keep settling, over real HTTP. Newest first with offset pages, every
 * new row pushes one from page 1 onto page 2, which then shows it again (and a row settling with an older
 * created_at shifts the other way: one is never seen). `cursor` (the previous page's `next_cursor`) pages by
 * the last row seen: every row that existed when the walk began comes exactly once, whatever is inserted.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
let seq = 0;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

const seed = (userId: number, at: number) => gw.services.relay.usageLogs.insertOnce({
  requestId: `req_cursor_${seq++}`, userId, apiKeyId: 1, channelId: 1, model: 'm', status: 200, errorCode: '',
  inputTokens: 1, outputTokens: 1, cost: 1, latencyMs: 5, createdAt: at,
});

test('cursor pages: no repeats or gaps while rows are inserted; each user walks only their own', async () => {
  const a = await makeUser(gw);
  const b = await makeUser(gw);
  const T = 1_800_000_000;
  // 25 rows of a, several per second (ties on created_at are ordered by id), and b's interleaved.
  for (let i = 0; i < 25; i++) { await seed(a.id, T + Math.floor(i / 3)); await seed(b.id, T + i); }
  const existing = (await gw.db.all('select id from usage_logs where user_id = ? order by created_at desc, id desc', a.id)).map((r) => r.id as number);
  expect(existing).toHaveLength(25);

  for (const [path, token] of [[`/api/log/?user_id=${a.id}`, undefined], ['/api/log/self', a.token]] as const) {
    const seen: number[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const r = await gw.api('GET', `${path}${path.includes('?') ? '&' : '?'}page_size=10${cursor ? `&cursor=${cursor}` : ''}`, undefined, token);
      expect(r.status).toBe(200);
      seen.push(...r.body.data.items.map((x: { id: number; user_id: number }) => { expect(x.user_id).toBe(a.id); return x.id; }));
      cursor = r.body.data.next_cursor;
      pages++;
      // Between pages: newer rows arrive, and one settles with a created_at among those already walked.
      await seed(a.id, T + 100 + pages);
      await seed(a.id, T + 1);
      await seed(b.id, T + 5);
    } while (cursor && pages < 10);
    // Rows inserted behind the cursor (created_at T+1, already passed) may or may not show; the walk's own rows all do, once.
    const original = seen.filter((id) => existing.includes(id));
    expect(original).toEqual(existing);
    expect(new Set(seen).size).toBe(seen.length);
  }

  // A malformed cursor is a 400 naming it, not a 500.
  const bad = await gw.api('GET', '/api/log/self?cursor=1e9.2', undefined, a.token);
  expect(bad.status).toBe(400);
  expect(JSON.stringify(bad.body)).toContain('cursor');
}, 30_000);
