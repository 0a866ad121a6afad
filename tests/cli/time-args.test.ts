/**
 * Points in time on the command line (`--expires-at`, `--from`, `--to`): unix seconds or an ISO date/date-time,
 * nothing else. `Date.parse` alone read a typo as some date in 2001 (`-1`, `1.5`, `Nov 5`) or rolled an impossible
 * date into the next month (`2027-02-30` → 2 March), and the command went on with exit 0.
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
