/**
 * Usage statistics whose sums pass 2^53 − 1 (README: Usage statistics and export, "Sums past 2^53"), over real
 * HTTP on both backends. Rows are written straight into usage_logs (normal traffic would need years to get
 * there): a day whose cost sums past 2^63 (SQLite's sum() failed the query with "integer overflow", a 500) and
 * tokens past 2^53 (read back rounded). The answer is 200; each such field holds 2^53 − 1 and `exact` carries
 * its exact decimal; rows below the cap are plain exact numbers without `exact`. The export of those rows
 * answers 200 too.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

const TOP = Number.MAX_SAFE_INTEGER;
const DAY = 86_400;
const D0 = Date.UTC(2026, 9, 1) / 1000;
let gw: TestGateway;
let u: { id: number; token: string };

/** One usage row with literal values (so PostgreSQL gets the exact digits, not a JS number's rounding). */
async function row(n: number, at: number, v: { cost: string; input?: string; output?: string; audioIn?: string; audioOut?: string }) {
  await gw.db.all(`insert into usage_logs (request_id, user_id, api_key_id, model, status, cost, input_tokens, output_tokens,
      audio_input_tokens, audio_output_tokens, latency_ms, created_at)
    values ('req_sums_${n}', ${u.id}, 1, 'sum-model', 200, ${v.cost}, ${v.input ?? 0}, ${v.output ?? 0}, ${v.audioIn ?? 0}, ${v.audioOut ?? 0}, 10, ${at})`);
}

beforeAll(async () => {
  gw = await startGateway();
  u = await makeUser(gw);
  await row(1, D0 + 60, { cost: '5000000000000000000', input: String(TOP), audioIn: '5000000000000000000', audioOut: '5000000000000000000' });
  await row(2, D0 + 120, { cost: '5000000000000000000', input: String(TOP), output: '3' });
  await row(3, D0 + 180, { cost: String(TOP), input: '1' });
  await row(4, D0 + 240, { cost: '5' });
  // The next day stays below the cap: plain numbers.
  await row(5, D0 + DAY + 60, { cost: String(TOP - 1), input: '7' });
}, 30_000);
afterAll(async () => { await gw.stop(); });

const range = `start_timestamp=${D0}&end_timestamp=${D0 + 2 * DAY - 1}`;

function expectSums(items: any[]) {
  expect(items).toHaveLength(2);
  const [big, small] = items;
  expect(big).toMatchObject({ bucket: D0, requests: 4, cost: TOP, input_tokens: TOP, output_tokens: 3, audio_tokens: TOP, cache_read_tokens: 0 });
  expect(big.exact).toEqual({ cost: '10009007199254740996', input_tokens: '18014398509481983', audio_tokens: '10000000000000000000' });
  expect(small).toMatchObject({ bucket: D0 + DAY, requests: 1, cost: TOP - 1, input_tokens: 7, audio_tokens: 0 });
  expect('exact' in small).toBe(false);
}

describe('statistics past 2^53', () => {
  test('GET /api/log/stats: 200, saturated fields at 2^53 − 1 with their exact sums, the other rows exact', async () => {
    const r = await gw.api('GET', `/api/log/stats?${range}&user_id=${u.id}`);
    expect(r.status).toBe(200);
    expectSums(r.body.data.items);
    // Grouped, the same sums per group.
    const g = await gw.api('GET', `/api/log/stats?${range}&user_id=${u.id}&group_by=model`);
    expect(g.status).toBe(200);
    expectSums(g.body.data.items);
  });

  test('GET /api/log/stats/self: the same for the owner', async () => {
    const r = await gw.api('GET', `/api/log/stats/self?${range}`, undefined, u.token);
    expect(r.status).toBe(200);
    expectSums(r.body.data.items);
  });

  test('GET /api/log/export: 200 with every row; a row at 2^53 − 1 reads back exactly', async () => {
    const res = await fetch(`${gw.url}/api/log/export?format=jsonl&user_id=${u.id}`, { headers: { authorization: `Bearer ${gw.rootToken}` } });
    expect(res.status).toBe(200);
    const lines = (await res.text()).trim().split('\n').map((l) => JSON.parse(l));
    expect(lines.map((l) => l.request_id)).toEqual(['req_sums_1', 'req_sums_2', 'req_sums_3', 'req_sums_4', 'req_sums_5']);
    expect(lines[2].cost).toBe(TOP);
    expect(lines[4].cost).toBe(TOP - 1);
    const csv = await fetch(`${gw.url}/api/log/export/self?format=csv`, { headers: { authorization: `Bearer ${u.token}` } });
    expect(csv.status).toBe(200);
    expect((await csv.text()).trim().split('\r\n')).toHaveLength(6);
  });
});
