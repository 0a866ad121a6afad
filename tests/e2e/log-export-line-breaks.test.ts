/**
 * JSON Lines exports hold one record per line for every line reader, not only JSON's: U+2028, U+2029 and U+0085
 * are legal raw in JSON strings, but Python's `str.splitlines` (and editors) break a line at each, splitting a
 * record whose model name (client-chosen text) holds one. Over real HTTP: the export's bytes hold none raw, and
 * each record reads back exactly. CSV fields holding any such break are quoted, so a CSV reader that ends a record
 * at each of them outside quotes still reads one record per row; a lone surrogate reads as U+FFFD in both formats.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { parseCsv } from '../helpers/csv';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { seedGatewayUsageRows } from '../helpers/usage-seed';

let gw: TestGateway;
const MODEL = 'a\u2028b\u2029c\u0085d';
/** One line break of each kind Python's splitlines knows, past CR and LF (which were quoted already). */
const BREAKS = ['v\u2028', 'p\u2029', 'n\u0085', 'vt\v', 'ff\f', 'fs\x1c', 'gs\x1d', 'rs\x1e'].map((m) => `${m}x`);
const LONE = 'lone\ud800x';
const FROM = Date.UTC(2026, 0, 1) / 1000;

beforeAll(async () => {
  gw = await startGateway();
  await seedGatewayUsageRows(gw.services, { rows: 3, from: FROM, spanSeconds: 60, users: 1, modelOf: (i) => (i === 1 ? MODEL : undefined) });
  await seedGatewayUsageRows(gw.services, {
    rows: BREAKS.length + 1, from: FROM + 3_600, spanSeconds: 60, users: 1, requestPrefix: 'req_csv_', modelOf: (i) => BREAKS[i] ?? LONE,
  });
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
  const recs = lines.map((l) => JSON.parse(l)).filter((r) => !r.request_id.startsWith('req_csv_'));
  expect(recs).toHaveLength(3);
  expect(recs.filter((r) => r.model === MODEL)).toHaveLength(1);
});

test('a CSV field holding any Unicode line break is quoted: a reader ending records at each sees one record per row', async () => {
  const get = async (format: string) => {
    const res = await fetch(`${gw.url}/api/log/export?format=${format}&start_timestamp=${FROM + 3_600}`, { headers: { authorization: `Bearer ${gw.rootToken}` } });
    expect(res.status).toBe(200);
    return res.text();
  };
  const csv = await get('csv');
  // Records end at every splitlines break outside quotes, as a Unicode-aware line splitter feeding a CSV parser does.
  const rows = splitOutsideQuotes(csv).filter((r) => r !== '').map((r) => parseCsv(r)[0]!);
  const model = rows[0]!.indexOf('model');
  expect(rows.slice(1).map((r) => r[model])).toEqual([...BREAKS, 'lone\ufffdx']);
  // The lone surrogate: U+FFFD in JSON Lines too, so both formats give the same model.
  const jsonl = (await get('jsonl')).trimEnd().split('\n').map((l) => JSON.parse(l).model);
  expect(jsonl).toEqual(rows.slice(1).map((r) => r[model]));
});

/** Records of `text`, split at each splitlines break outside double quotes. */
function splitOutsideQuotes(text: string): string[] {
  const out: string[] = [];
  let cur = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c === '"') quoted = !quoted;
    if (!quoted && /[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]/.test(c)) {
      if (c === '\r' && text[i + 1] === '\n') i++;
      out.push(cur);
      cur = '';
    } else cur += c;
  }
  out.push(cur);
  return out;
}
