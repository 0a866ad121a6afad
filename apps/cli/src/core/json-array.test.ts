import { expect, test } from 'bun:test';
import { jsonArrayOf } from './json-array';

async function collect(parts: Array<string | Uint8Array>, maxLine = 1024): Promise<string> {
  async function* chunks() { for (const p of parts) yield typeof p === 'string' ? new TextEncoder().encode(p) : p; }
  let out = '';
  for await (const t of jsonArrayOf(chunks(), 'http://gw', maxLine)) out += t;
  return out;
}

test('rows cut anywhere (mid-row, mid-character) become one array of the same values', async () => {
  const rows = [{ a: 1, m: 'é€😀' }, { a: 2, m: 'x' }, { a: 3, m: '' }];
  const bytes = new TextEncoder().encode(rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  for (const cut of [1, 5, 12, 13, 14, bytes.length - 1]) {
    expect(JSON.parse(await collect([bytes.slice(0, cut), bytes.slice(cut)]))).toEqual(rows);
  }
  // No final newline, blank lines and CRLF are the same rows.
  expect(JSON.parse(await collect(['{"a":1}\r\n\n{"a":2}']))).toEqual([{ a: 1 }, { a: 2 }]);
  expect(await collect([])).toBe('[]\n');
});

test('terminal-driving characters are escaped as in every --json output; hostile lines are refused', async () => {
  const out = await collect([`${JSON.stringify({ m: 'a\u2028b\u202ec\u009b' })}\n`]);
  expect(out).not.toMatch(/[\u2028\u202e\u009b]/);
  expect(JSON.parse(out)).toEqual([{ m: 'a\u2028b\u202ec\u009b' }]);
  await expect(collect(['{"a":1}\nnot json\n'])).rejects.toMatchObject({ code: 'http_200' });
  await expect(collect(['{"a":"' + 'x'.repeat(600), 'x'.repeat(600)], 1024)).rejects.toMatchObject({ code: 'answer_too_large' });
});
