/**
 * `gw log stats` and `gw log export` as subprocesses against a real gateway: the table and chart show
 * what the API computed, --json is the API's data, the export reaches stdout or a file byte for byte,
 * and bad flags are usage errors (exit 2) while server refusals are exit 1.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { existsSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { cliSandbox, type CliSandbox } from './run-cli';

let gw: TestGateway;
let sb: CliSandbox;
let env: Record<string, string>;
let user: { id: number; token: string };
const DAY = 86_400;
const D0 = Date.UTC(2026, 4, 1) / 1000;

beforeAll(async () => {
  gw = await startGateway();
  sb = cliSandbox();
  env = { GATEWAY_URL: gw.url, GATEWAY_TOKEN: gw.rootToken };
  user = await makeUser(gw);
  // Day 0: 3 requests on m-a; day 2: 1 on m-b (a failure) and 6 of the user's on m-a. Day 1 is empty.
  const rows: Array<[number, string, number, number]> = [
    [D0 + 100, 'm-a', 1, 200], [D0 + 200, 'm-a', 1, 200], [D0 + 300, 'm-a', 1, 200], [D0 + 2 * DAY + 50, 'm-b', 1, 500],
    ...Array.from({ length: 6 }, (_, i): [number, string, number, number] => [D0 + 2 * DAY + 100 + i, 'm-a', user.id, 200]),
  ];
  await Promise.all(rows.map(([at, model, userId, status], i) => gw.services.relay.usageLogs.insertOnce({
    requestId: `req_cli_stats_${i}`, userId, apiKeyId: userId * 10, channelId: 3, model, status, errorCode: status >= 400 ? 'upstream_error' : '',
    inputTokens: 100, outputTokens: 10, cost: status >= 400 ? 0 : 250, latencyMs: 800 + i, createdAt: at,
  })));
});
afterAll(async () => { await gw.stop(); sb.cleanup(); });

const gwc = (args: string[], e: Record<string, string> = env) => sb.run(args, { env: e });
const range = ['--from', new Date(D0 * 1000).toISOString(), '--to', String(D0 + 3 * DAY - 1)];

describe('gw log stats', () => {
  test('table per day and model, then a chart with the empty day blank', async () => {
    const r = await gwc(['log', 'stats', ...range, '--by', 'model']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const lines = r.stdout.split('\n');
    expect(lines[0]).toMatch(/^BUCKET\s+MODEL\s+REQS\s+ERRS\s+IN\s+OUT\s+CACHE R\s+CACHE W\s+AUDIO\s+COST\s+P50 MS\s+P99 MS$/);
    expect(lines[1]).toMatch(/^2026-05-01\s+m-a\s+3\s+0\s+300\s+30\s+0\s+0\s+0\s+750\s+\d+\s+\d+$/);
    expect(lines[2]).toMatch(/^2026-05-03\s+m-a\s+6\s+0\s+600\s/);
    expect(lines[3]).toMatch(/^2026-05-03\s+m-b\s+1\s+1\s/);
    expect(r.stdout).toContain('2026-05-01 .. 2026-05-03 (per day, UTC+0min)');
    // Three buckets: 3 requests, none, 7 requests; cost 750, 0, 1500.
    expect(r.stdout).toMatch(/\nrequests {2}▄ █ {2}max 7\n/);
    expect(r.stdout).toMatch(/\ncost {6}▄ █ {2}max 1500\n/);
  });

  test('--json is the API\'s data; --self shows only the caller\'s requests', async () => {
    const cli = JSON.parse((await gwc(['log', 'stats', ...range, '--by', 'user', '--granularity', 'hour', '--json'])).stdout);
    const api = await gw.api('GET', `/api/log/stats?start_timestamp=${D0}&end_timestamp=${D0 + 3 * DAY - 1}&group_by=user&granularity=hour`);
    expect(cli).toEqual(api.body.data);
    expect(cli.items.map((i: any) => [i.bucket, i.group, i.requests])).toEqual([[D0, 1, 3], [D0 + 2 * DAY, 1, 1], [D0 + 2 * DAY, user.id, 6]]);
    const self = JSON.parse((await gwc(['log', 'stats', ...range, '--json'], { GATEWAY_URL: gw.url, GATEWAY_TOKEN: user.token })).stdout);
    expect(self.items).toMatchObject([{ bucket: D0 + 2 * DAY, requests: 6, cost: 1500 }]);
  });

  test('bad flags exit 2; refusals by the server exit 1 with its reason', async () => {
    expect((await gwc(['log', 'stats', '--by', 'ip'])).code).toBe(2);
    expect((await gwc(['log', 'stats', '--from', 'someday'])).code).toBe(2);
    expect((await gwc(['log', 'stats', '--self', '--user-id', '2'])).code).toBe(2);
    const wide = await gwc(['log', 'stats', '--granularity', 'hour', '--from', '2026-01-01', '--to', '2026-03-01']);
    expect(wide.code).toBe(1);
    expect(wide.stderr).toContain('range_too_large');
    const byChannel = await gwc(['log', 'stats', '--by', 'channel'], { GATEWAY_URL: gw.url, GATEWAY_TOKEN: user.token });
    expect(byChannel.code).toBe(1);
    expect(byChannel.stderr).toContain('--by');
  });
});

describe('gw log export', () => {
  test('CSV to a file equals the API export; JSON Lines to stdout with filters', async () => {
    const out = join(sb.dir, 'logs.csv');
    const r = await gwc(['log', 'export', '--out', out, ...range]);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/^Wrote \d+ bytes to .*logs\.csv\.\n$/);
    const api = await (await fetch(`${gw.url}/api/log/export?format=csv&start_timestamp=${D0}&end_timestamp=${D0 + 3 * DAY - 1}`, { headers: { authorization: `Bearer ${gw.rootToken}` } })).text();
    expect(readFileSync(out, 'utf8')).toBe(api);
    expect(api.split('\r\n').length).toBe(1 + 10 + 1);

    const jl = await gwc(['log', 'export', '--format', 'jsonl', '--model', 'm-b']);
    expect(jl.code).toBe(0);
    expect(jl.stdout.trim().split('\n').map((l) => JSON.parse(l))).toMatchObject([{ model: 'm-b', status: 500, error_code: 'upstream_error' }]);
    const mine = await gwc(['log', 'export', '--format', 'jsonl'], { GATEWAY_URL: gw.url, GATEWAY_TOKEN: user.token });
    expect(mine.stdout.trim().split('\n')).toHaveLength(6);
    expect((await gwc(['log', 'export', '--format', 'xml'])).code).toBe(2);
  });

  test('--json prints one JSON document: an array of the rows the JSON Lines export holds (it printed CSV)', async () => {
    const api = await (await fetch(`${gw.url}/api/log/export?format=jsonl&start_timestamp=${D0}&end_timestamp=${D0 + 3 * DAY - 1}`, { headers: { authorization: `Bearer ${gw.rootToken}` } })).text();
    const rows = api.trim().split('\n').map((l) => JSON.parse(l));
    expect(rows).toHaveLength(10);
    const r = await gwc(['log', 'export', '--json', ...range]);
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: '' });
    expect(JSON.parse(r.stdout)).toEqual(rows);
    // Filters, an empty export, and --format jsonl (the same rows) keep it one document.
    expect(JSON.parse((await gwc(['log', 'export', '--json', '--model', 'm-b'])).stdout)).toMatchObject([{ model: 'm-b', status: 500 }]);
    expect(JSON.parse((await gwc(['log', 'export', '--json', '--model', 'no-such-model'])).stdout)).toEqual([]);
    expect(JSON.parse((await gwc(['log', 'export', '--json', '--format', 'jsonl', ...range])).stdout)).toEqual(rows);
    const mine = JSON.parse((await gwc(['log', 'export', '--json'], { GATEWAY_URL: gw.url, GATEWAY_TOKEN: user.token })).stdout);
    expect(mine.map((x: any) => x.user_id)).toEqual(Array(6).fill(user.id));
    // CSV asked for explicitly cannot also be JSON: a usage error, itself one JSON document.
    const both = await gwc(['log', 'export', '--json', '--format', 'csv']);
    expect({ code: both.code, error: JSON.parse(both.stdout).error?.code }).toEqual({ code: 2, error: 'usage_error' });
    // --out: the file holds the array; stdout says where it went, as one JSON document.
    const out = join(sb.dir, 'logs.json');
    const f = await gwc(['log', 'export', '--json', '--out', out, ...range]);
    expect(f.code).toBe(0);
    expect(JSON.parse(readFileSync(out, 'utf8'))).toEqual(rows);
    expect(JSON.parse(f.stdout)).toEqual({ out, bytes: statSync(out).size });
  });

  test('--out: a new file is 0600 (other users\' usage and addresses are in it); a path that cannot be written is exit 2 with one line', async () => {
    const out = join(sb.dir, 'private.csv');
    expect((await gwc(['log', 'export', '--out', out, ...range])).code).toBe(0);
    expect(statSync(out).mode & 0o777).toBe(0o600);
    for (const [bad, why] of [[join(sb.dir, 'no-such-dir', 'x.csv'), 'ENOENT'], [sb.dir, 'EISDIR']] as const) {
      const r = await gwc(['log', 'export', '--out', bad, ...range]);
      expect(r.code).toBe(2);
      expect(r.stderr).toBe(`error: --out: cannot write ${bad} (${why})\n`);
    }
  });

  test('--out: a refused export leaves an existing file as it was and creates none; a served one replaces it whole', async () => {
    const kept = join(sb.dir, 'yesterday.csv');
    const fresh = join(sb.dir, 'never.csv');
    const old = 'yesterday\'s export\n'.repeat(10_000);
    writeFileSync(kept, old);
    const refused = { GATEWAY_URL: gw.url, GATEWAY_TOKEN: 'gw-expired-or-wrong-token' };
    for (const out of [kept, fresh]) {
      // --self: no lookup of the caller first, so the export request itself is what the gateway refuses.
      const r = await gwc(['log', 'export', '--self', '--out', out, ...range], refused);
      expect(r.code).not.toBe(0);
      expect(r.stderr).toStartWith('error:');
    }
    expect(readFileSync(kept, 'utf8')).toBe(old);
    expect(existsSync(fresh)).toBe(false);
    // Served: the old content (longer than the export) is gone, not left as a tail.
    expect((await gwc(['log', 'export', '--out', kept, ...range])).code).toBe(0);
    const api = await (await fetch(`${gw.url}/api/log/export?format=csv&start_timestamp=${D0}&end_timestamp=${D0 + 3 * DAY - 1}`, { headers: { authorization: `Bearer ${gw.rootToken}` } })).text();
    expect(readFileSync(kept, 'utf8')).toBe(api);
    // What is not a regular file is written as it is (a truncate fails there): a named pipe (what `--out >(gzip)`
    // passes), /dev/null; and a link to a file still to be made is followed as before.
    const fifo = join(sb.dir, 'export.fifo');
    expect(Bun.spawnSync(['mkfifo', fifo]).exitCode).toBe(0);
    const reader = Bun.spawn(['cat', fifo], { stdout: 'pipe' });
    const piped = await gwc(['log', 'export', '--out', fifo, ...range]);
    expect([piped.code, await new Response(reader.stdout).text()]).toEqual([0, api]);
    expect((await gwc(['log', 'export', '--out', '/dev/null', ...range])).code).toBe(0);
    const link = join(sb.dir, 'latest.csv');
    symlinkSync(join(sb.dir, 'made-later.csv'), link);
    expect((await gwc(['log', 'export', '--out', link, ...range])).code).toBe(0);
    expect(readFileSync(join(sb.dir, 'made-later.csv'), 'utf8')).toBe(api);
  });
});
