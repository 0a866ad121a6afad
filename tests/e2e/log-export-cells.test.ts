/**
 * The CSV export as a spreadsheet reads it. Behind a proxy that passes the client's X-Forwarded-For on
 * (TRUST_PROXY), the `ip` of a usage row is whatever text the client sent, and a header value may hold a
 * tab. Spreadsheets split a CSV on more than commas (LibreOffice's import offers comma, semicolon and tab
 * together; Excel uses the locale's list separator), so a field is read here with all three as separators
 * outside quotes: no cell may then start as a formula, and an RFC 4180 reader still gets the text back.
 * Nor may that text be as long as a header allows in every row it is recorded in.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { createHash } from 'node:crypto';
import { setTrustProxy } from '../../apps/server/src/plugins/client-ip';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, send, setPrice, upstream, V, type Scripted } from './relay-setup';
import { parseCsv } from '../helpers/csv';

let gw: TestGateway;
let up: Scripted;
const FORWARDED = ['203.0.113.7\t=1+2', '203.0.113.8\t@SUM(A1)', '203.0.113.9;=3+4', '=HYPERLINK("http://x")', '198.51.100.1'];

beforeAll(async () => {
  // The in-process node is told here; a cluster's other nodes read TRUST_PROXY themselves.
  setTrustProxy(true);
  gw = await startGateway({ TRUST_PROXY: 'true' });
  up = upstream('anthropic', { text: 'hi', usage: { input: 10, output: 2 } });
});
afterAll(async () => {
  setTrustProxy(false);
  await gw.stop();
  await up.stop();
});

const formula = (cell: string) => /^[=+\-@]/.test(cell) && !/^-?\d+$/.test(cell);

test('a forwarded address with a tab or semicolon stays one cell, and no cell starts as a formula', async () => {
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['cells-model'] });
  await setPrice(gw, 'cells-model');
  const u = await keyedUser(gw);
  for (const xff of FORWARDED) expect((await send(gw, u.key, msg('cells-model'), { ...V, 'x-forwarded-for': xff })).status).toBe(200);
  for (const [path, token] of [['/api/log/export/self', u.token], [`/api/log/export?user_id=${u.id}`, gw.rootToken]] as const) {
    const res = await fetch(gw.url + path, { headers: { authorization: `Bearer ${token}` } });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(parseCsv(text, ',;\t').flat().filter(formula)).toEqual([]);
    const [header, ...rows] = parseCsv(text);
    const ips = rows.map((r) => r[header!.indexOf('ip')]!).sort();
    // Read back exactly, with the apostrophe only where the text itself opens like a formula.
    expect(ips).toEqual(FORWARDED.map((x) => (/^[=+\-@]/.test(x) ? `'${x}` : x)).sort());
  }
});

test('a forwarded "address" longer than any address is recorded by its SHA-256, not whole in every row', async () => {
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['long-ip-model'] });
  await setPrice(gw, 'long-ip-model');
  const u = await keyedUser(gw);
  const junk = `=${'x'.repeat(12_000)}`;
  const v6 = '2001:db8:85a3:1234:5678:8a2e:370:7334';
  for (const xff of [junk, v6]) expect((await send(gw, u.key, msg('long-ip-model'), { ...V, 'x-forwarded-for': xff })).status).toBe(200);
  const list = await gw.api('GET', '/api/log/self', undefined, u.token);
  expect(list.body.data.items.map((r: { ip: string }) => r.ip).sort())
    .toEqual([v6, `sha256:${createHash('sha256').update(junk).digest('hex')}`].sort());
});
