/**
 * Free-text arguments that become a URL path segment (`pricing get|delete <model>`, `topup get <trade-no>`)
 * address that one resource and no other route: `/`, `?`, `#` stay inside the segment, and `.`, `..` or an
 * empty value, which URL parsing turns into the parent route, are refused before anything is sent.
 *
 * Points in time (`--expires-at`, `--from`, `--to`) are unix seconds or an ISO date/date-time, nothing else.
 * `Date.parse` alone read a typo as some date in 2001 (`-1`, `1.5`, `Nov 5`) or rolled an impossible date into
 * the next month (`2027-02-30` → 2 March), and the command went on with exit 0.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { cliSandbox, type CliSandbox } from './run-cli';

let gw: TestGateway;
let sb: CliSandbox;
let env: Record<string, string>;
beforeAll(async () => {
  gw = await startGateway();
  sb = cliSandbox();
  env = { GATEWAY_URL: gw.url, GATEWAY_TOKEN: gw.rootToken };
});
afterAll(async () => { await gw.stop(); sb.cleanup(); });

const gwc = (args: string[]) => sb.run(args, { env });

test("'.', '..' and '' never reach another route: usage error, nothing sent", async () => {
  // The gateway refuses these as model names now, but an older one (or a copied database) may hold them; a
  // price that exists shows `pricing get .` reading the list.
  expect((await gw.api('PUT', '/api/pricing/', { model: 'keep', input: 1, output: 1 })).status).toBe(200);
  for (const args of [['pricing', 'get', '.'], ['pricing', 'get', '..'], ['pricing', 'get', ''], ['pricing', 'delete', '.'], ['topup', 'get', '.'], ['topup', 'get', '..']]) {
    const r = await gwc(args);
    // Before: `pricing get .` read GET /api/pricing/ (the list) and printed an empty price with exit 0.
    expect({ args, code: r.code, stdout: r.stdout }).toEqual({ args, code: 2, stdout: '' });
    expect(r.stderr).toContain('cannot be named in a URL path');
  }
  expect((await gw.api('GET', '/api/pricing/')).body.data.map((p: any) => p.model)).toEqual(['keep']);
});

test('slashes, ? and # stay inside the segment', async () => {
  expect((await gw.api('PUT', '/api/pricing/', { model: 'org/m?x#y', input: 5, output: 6 })).status).toBe(200);
  const r = await gwc(['pricing', 'get', 'org/m?x#y', '--json']);
  expect(r.code).toBe(0);
  expect(JSON.parse(r.stdout)).toMatchObject({ model: 'org/m?x#y', input: 5, output: 6 });
  const other = await gwc(['pricing', 'get', '../pricing']);
  expect(other.code).toBe(1);
  expect(other.stderr).toContain('price_not_found');
});

const year = new Date().getUTCFullYear() + 1;
const keyNames = async () => ((await gw.api('GET', '/api/token/?page_size=100', undefined, gw.rootToken)).body.data.items as { name: string }[]).map((k) => k.name);

test('an impossible or non-ISO date is a usage error (exit 2) and nothing is created', async () => {
  for (const [name, when] of [['feb30', `${year}-02-30`], ['minus1', '-1'], ['decimal', '1.5'], ['words', 'tomorrow 5'], ['huge', '99999999999999999999']]) {
    const r = await gwc(['key', 'create', '--name', name!, '--expires-at', when!]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toStartWith(`error: option '--expires-at <time|never>' argument '${when}' is invalid.`);
  }
  expect((await keyNames()).filter((n) => ['feb30', 'minus1', 'decimal', 'words', 'huge'].includes(n))).toEqual([]);

  const from = await gwc(['log', 'list', '--from', 'Nov 5']);
  expect(from.code).toBe(2);
  expect(from.stderr).toContain('expected unix seconds or an ISO date');
});

test('unix seconds, ISO dates and date-times with a zone are taken exactly', async () => {
  const at = Date.UTC(year, 1, 28, 12, 30) / 1000;
  for (const [name, when] of [['secs', String(at)], ['iso', `${year}-02-28T12:30:00Z`], ['offset', `${year}-02-28 13:30+01:00`]]) {
    const r = await gwc(['key', 'create', '--name', name!, '--expires-at', when!, '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).expires_at).toBe(at);
  }
  const day = await gwc(['key', 'create', '--name', 'day', '--expires-at', `${year}-02-28`, '--json']);
  expect(JSON.parse(day.stdout).expires_at).toBe(Date.UTC(year, 1, 28) / 1000);
  expect((await gwc(['log', 'list', '--from', '2026-01-01', '--to', `${year}-01-01T00:00`])).code).toBe(0);
});
