/**
 * GET /api/log/export and /api/log/export/self over real HTTP: every matching row exactly once in id
 * order, correct CSV quoting (read back with an RFC 4180 parser), JSON Lines equal to the listing's
 * records, the caller's own rows only on /self, and the JSON error object on bad input.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { parseCsv } from '../helpers/csv';
import { seedGatewayUsageRows } from '../helpers/usage-seed';

let gw: TestGateway;
let alice: { id: number; token: string };
const ROWS = 50_000;
const FROM = Date.UTC(2026, 0, 1) / 1000;
const HOSTILE = ['a,b', 'say "hi", ok', 'line\nbreak\r\nthen', '=HYPERLINK("http://x")', '-2+3', '@SUM(A1)', 'ü中文🙂', ' lead'];

beforeAll(async () => {
  gw = await startGateway();
  alice = await makeUser(gw); // id 2: the seed's users are 1..50, so alice owns some of the rows
  await seedGatewayUsageRows(gw.services, {
    rows: ROWS, from: FROM, spanSeconds: 30 * 86_400, users: 50,
    modelOf: (i) => (i % 997 === 0 ? HOSTILE[(i / 997) % HOSTILE.length] : undefined),
  });
}, 60_000);
afterAll(async () => { await gw.stop(); });

const get = (path: string, token: string | null = gw.rootToken) => fetch(gw.url + path, { headers: token ? { authorization: `Bearer ${token}` } : {} });
const count = async (where: string, ...args: any[]) => (await gw.db.get(`select count(*) n from usage_logs ${where}`, ...args)).n as number;

describe('export', () => {
  test(`CSV of all ${ROWS} rows: header, every id once in order, hostile text read back`, async () => {
    const res = await get('/api/log/export?format=csv');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/csv; charset=utf-8');
    expect(res.headers.get('content-disposition')).toMatch(/^attachment; filename="usage-logs-\d{8}-\d{6}\.csv"$/);
    const rows = parseCsv(await res.text());
    const [header, ...data] = rows;
    expect(header!.slice(0, 6)).toEqual(['id', 'request_id', 'kind', 'user_id', 'api_key_id', 'channel_id']);
    expect(data).toHaveLength(ROWS);
    expect(data.every((r) => r.length === header!.length)).toBe(true);
    const ids = data.map((r) => Number(r[0]));
    expect(ids.every((id, i) => id === i + 1)).toBe(true);
    const col = (name: string) => header!.indexOf(name);
    const byId = new Map(data.map((r) => [Number(r[0]), r]));
    for (let i = 0; i < ROWS; i += 997) {
      const want = HOSTILE[(i / 997) % HOSTILE.length]!;
      const got = byId.get(i + 1)![col('model')]!;
      // Text a spreadsheet would run as a formula is defused with a leading apostrophe.
      expect(got).toBe(/^[=+\-@]/.test(want) ? `'${want}` : want);
    }
    const db = await gw.db.get('select cost, channel_id, created_at from usage_logs where id = 12345');
    const r = byId.get(12345)!;
    expect([Number(r[col('cost')]), r[col('channel_id')] === '' ? null : Number(r[col('channel_id')]), Number(r[col('created_at')])])
      .toEqual([db.cost, db.channel_id, db.created_at]);
  }, 30_000);

  test('JSON Lines with filters equals the listing\'s records', async () => {
    const to = FROM + 10 * 86_400;
    const res = await get(`/api/log/export?format=jsonl&user_id=7&end_timestamp=${to}`);
    expect(res.headers.get('content-type')).toBe('application/x-ndjson; charset=utf-8');
    const lines = (await res.text()).split('\n');
    expect(lines.pop()).toBe('');
    const recs = lines.map((l) => JSON.parse(l));
    expect(recs.length).toBe(await count('where user_id = 7 and created_at <= ?', to));
    expect(recs.length).toBeGreaterThan(100);
    expect(recs.every((r) => r.user_id === 7 && r.created_at <= to)).toBe(true);
    const listed = await gw.api('GET', `/api/log/?user_id=7&end_timestamp=${to}&page_size=3`);
    // The listing is newest first; the export oldest first.
    expect(recs.slice(-3).reverse()).toEqual(listed.body.data.items);
  });

  test('self: only the caller\'s rows, channel hidden, user and channel filters ignored', async () => {
    const res = await get(`/api/log/export/self?format=jsonl&user_id=7`, alice.token);
    expect(res.status).toBe(200);
    const recs = (await res.text()).trim().split('\n').map((l) => JSON.parse(l));
    expect(recs.length).toBe(await count('where user_id = ?', alice.id));
    expect(recs.length).toBeGreaterThan(100);
    expect(recs.every((r) => r.user_id === alice.id && r.channel_id === null && r.upstream_model === '')).toBe(true);
    expect((await get('/api/log/export', alice.token)).status).toBe(403);
    expect((await get('/api/log/export/self', null)).status).toBe(401);
  });

  test('an empty result is a header only; bad input is a JSON 400', async () => {
    const empty = await get(`/api/log/export?start_timestamp=${FROM + 400 * 86_400}`);
    expect(parseCsv(await empty.text())).toHaveLength(1);
    for (const [query, param] of [['format=xml', 'format'], ['token_id=abc', 'token_id'], ['status=99', 'status'], ['start_timestamp=-1', 'start_timestamp']]) {
      const r = await get(`/api/log/export?${query}`);
      expect({ query, status: r.status }).toEqual({ query, status: 400 });
      const body = (await r.json()) as any;
      expect(body.error.param).toBe(param);
    }
  });
});
