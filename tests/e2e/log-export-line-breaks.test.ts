/**
 * JSON Lines exports hold one record per line for every line reader, not only JSON's: U+2028, U+2029 and U+0085
 * are legal raw in JSON strings, but Python's `str.splitlines` (and editors) break a line at each, splitting a
 * record whose model name (client-chosen text) holds one. Over real HTTP: the export's bytes hold none raw, and
 * each record reads back exactly.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { seedGatewayUsageRows } from '../helpers/usage-seed';

let gw: TestGateway;
const MODEL = 'a\u2028b\u2029c\u0085d';
const FROM = Date.UTC(2026, 0, 1) / 1000;

beforeAll(async () => {
  gw = await startGateway();
  await seedGatewayUsageRows(gw.services, { rows: 3, from: FROM, spanSeconds: 60, users: 1, modelOf: (i) => (i === 1 ? MODEL : undefined) });
});
afterAll(async () => { await gw.stop(); });

/** The line breaks of Python's str.splitlines. */
const splitlines = (s: string) => s.split(/\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]/);

test('a record whose text holds U+2028, U+2029 or U+0085 stays one line, escaped, and reads back exactly', async () => {
  const res = await fetch(`${gw.url}/api/log/export?format=jsonl`, { headers: { authorization: `Bearer ${gw.rootToken}` } });
  expect(res.status).toBe(200);
  const body = await res.text();
  expect(body).not.toMatch(/[\u0085\u2028\u2029]/);
  expect(body).toContain('a\\u2028b\\u2029c\\u0085d');
  const lines = splitlines(body);
  expect(lines.pop()).toBe('');
  const recs = lines.map((l) => JSON.parse(l));
  expect(recs).toHaveLength(3);
  expect(recs.filter((r) => r.model === MODEL)).toHaveLength(1);
});
