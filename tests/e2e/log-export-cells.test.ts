/**
 * The CSV export as a spreadsheet reads it. Behind a proxy that passes the client's X-Forwarded-For on
 * (TRUST_PROXY), the client writes the header, and a header value may hold a tab or start like a formula.
 * Spreadsheets split a CSV on more than commas (LibreOffice's import offers comma, semicolon and tab
 * together; Excel uses the locale's list separator), so a field is read here with all three as separators
 * outside quotes: no cell may then start as a formula. A forwarded entry that names no address is recorded as
 * the socket's address, so neither such text nor a header's worth of it reaches a usage row.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
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

test('forwarded text that names no address is recorded as the socket\'s address, and no cell starts as a formula', async () => {
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
    const ips = rows.map((r) => r[header!.indexOf('ip')]!);
    // Four rows from the socket (loopback, in either spelling), one from the address the header named.
    expect(ips.filter((ip) => ip === '198.51.100.1')).toHaveLength(1);
    expect(ips.filter((ip) => ip !== '198.51.100.1').every((ip) => /^(127\.0\.0\.1|::1|::ffff:127\.0\.0\.1)$/.test(ip))).toBe(true);
    expect(ips).toHaveLength(FORWARDED.length);
  }
});

test('a forwarded "address" longer than any address is not recorded; a real IPv6 address is', async () => {
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['long-ip-model'] });
  await setPrice(gw, 'long-ip-model');
  const u = await keyedUser(gw);
  const junk = `=${'x'.repeat(12_000)}`;
  // A zone id parses as the address before it: the text after `%` must not come along.
  const zoned = `fe80::1%${'y'.repeat(12_000)}`;
  const v6 = '2001:db8:85a3:1234:5678:8a2e:370:7334';
  for (const xff of [junk, zoned, v6]) expect((await send(gw, u.key, msg('long-ip-model'), { ...V, 'x-forwarded-for': xff })).status).toBe(200);
  const list = await gw.api('GET', '/api/log/self', undefined, u.token);
  const ips: string[] = list.body.data.items.map((r: { ip: string }) => r.ip);
  expect(ips).toContain(v6);
  expect(ips.every((ip) => ip.length <= 45)).toBe(true);
});
