/**
 * Strings other people control reach the operator's terminal through `gw`: a user's key names, an upstream's
 * error text in `channel test`, a server's error message. None of them may drive the terminal (OSC 52
 * clipboard writes, screen clears, carriage returns that overwrite a line, bidi overrides that reverse one),
 * and `--json` still carries every value exactly.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
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

const gwc = (args: string[], extraEnv: Record<string, string> = {}) => sb.run(args, { env: { ...env, ...extraEnv } });

const HOSTILE = 'ok\u001b]52;c;cm0gLXJmIH4=\u0007\u001b[2J\rroot\u0008\u009b31m\u202edesu';
/** ESC, BEL, CR, backspace, C1 CSI, RLO: any of them in terminal text is a defect. */
const DRIVES_TERMINAL = /[\u001b\u0007\r\u0008\u009b\u202e]/;

test("a user's hostile key name is inert in the admin's table, and exact in --json", async () => {
  const user = await makeUser(gw);
  const made = await gw.api('POST', '/api/token/', { name: HOSTILE }, user.token);
  expect(made.status).toBe(200);

  const list = await gwc(['key', 'list', '--user-id', String(user.id)]);
  expect(list.code).toBe(0);
  expect(list.stdout).toContain('ok ]52;c;cm0gLXJmIH4=');
  expect(list.stdout).not.toMatch(DRIVES_TERMINAL);
  const get = await gwc(['key', 'get', String(made.body.data.id)]);
  expect(get.stdout).not.toMatch(DRIVES_TERMINAL);

  const json = await gwc(['key', 'list', '--user-id', String(user.id), '--json']);
  expect(json.stdout).not.toMatch(DRIVES_TERMINAL);
  expect(JSON.parse(json.stdout).items[0].name).toBe(HOSTILE);
});

test("an upstream's error text in `channel test` cannot drive the terminal, on stdout or stderr", async () => {
  const upstream = Bun.serve({
    port: 0, hostname: '127.0.0.1',
    fetch: () => Response.json({ type: 'error', error: { type: 'invalid_request_error', message: HOSTILE } }, { status: 400 }),
  });
  try {
    const ch = (await gw.api('POST', '/api/channel/', { name: 'up', type: 'anthropic', base_url: `http://127.0.0.1:${upstream.port}`, key: 'k-12345678', models: ['m'] })).body.data;
    const r = await gwc(['channel', 'test', String(ch.id)]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`error: channel ${ch.id} failed the test:`);
    expect(r.stdout + r.stderr).not.toMatch(DRIVES_TERMINAL);
  } finally {
    upstream.stop(true);
  }
});

test("a server's error message is printed inert; the --json error keeps it exactly", async () => {
  // Not the gateway: whatever answers at the configured URL (a wrong URL, a compromised or MITM'd http one).
  const fake = Bun.serve({
    port: 0, hostname: '127.0.0.1',
    fetch: () => Response.json({ success: false, error: { message: HOSTILE, type: 'invalid_request_error', code: 'x' } }, { status: 400 }),
  });
  try {
    const url = `http://127.0.0.1:${fake.port}`;
    const r = await gwc(['whoami'], { GATEWAY_URL: url });
    expect(r.code).toBe(1);
    expect(r.stderr).toStartWith('error: ok ]52;c;');
    expect(r.stderr).not.toMatch(DRIVES_TERMINAL);

    const j = await gwc(['whoami', '--json'], { GATEWAY_URL: url });
    expect(j.stderr).not.toMatch(DRIVES_TERMINAL);
    expect(j.stdout).not.toMatch(DRIVES_TERMINAL);
    expect(JSON.parse(j.stdout).error.message).toBe(HOSTILE);
  } finally {
    fake.stop(true);
  }
});

/** Runs the CLI with stdout on a pseudo-terminal (util-linux `script`), as an operator at a shell does. */
async function onTerminal(args: string[]): Promise<{ code: number; out: string }> {
  const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
  const cmd = ['bun', 'run', `${import.meta.dir}/../../apps/cli/src/index.ts`, ...args].map(q).join(' ');
  const proc = Bun.spawn(['script', '-qec', cmd, '/dev/null'], {
    env: { PATH: process.env.PATH ?? '', HOME: sb.dir, GW_CONFIG: sb.configPath, NO_COLOR: '1', ...env },
    stdin: 'ignore', stdout: 'pipe', stderr: 'pipe',
  });
  const [out, code] = await Promise.all([new Response(proc.stdout).text(), proc.exited]);
  return { code, out };
}

test("`log export` and `metrics` print data as served into a pipe, but inert on a terminal", async () => {
  const user = await makeUser(gw);
  // Other people's text in a usage row (here the model name), as the usage log keeps it.
  await gw.services.relay.usageLogs.insertOnce({
    requestId: 'req_hostile_export', userId: user.id, apiKeyId: 1, channelId: 1, model: `m-${HOSTILE}`, status: 200, errorCode: '',
    inputTokens: 1, outputTokens: 1, cost: 1, latencyMs: 5, createdAt: Math.floor(Date.now() / 1000),
  });
  const args = ['log', 'export', '--user-id', String(user.id), '--format', 'csv'];
  const piped = await gwc(args);
  expect(piped.code).toBe(0);
  expect(piped.stdout).toContain(`"m-${HOSTILE}"`);

  const tty = await onTerminal(args);
  expect(tty.code).toBe(0);
  expect(tty.out).toContain('m-ok ]52;c;cm0gLXJmIH4=');
  // The terminal's own line endings are \r\n: everything that drives it but \r.
  expect(tty.out).not.toMatch(/[\u001b\u0007\u0008\u009b\u202e]/);

  const metrics = await onTerminal(['metrics']);
  expect(metrics.code).toBe(0);
  expect(metrics.out).toContain('# TYPE');
}, 30_000);

test("a newline in someone else's text cannot print a line of its own: every error and note stays one line", async () => {
  // An `error:` line followed by a fake all-clear, as a hostile server (or an upstream, in `channel test`) could send.
  const SPOOF = 'quota exceeded\nok: done, nothing to worry about\n';
  const fake = Bun.serve({
    port: 0, hostname: '127.0.0.1',
    fetch: () => Response.json({ success: false, error: { message: SPOOF, type: 'invalid_request_error', code: 'x' } }, { status: 400 }),
  });
  const upstream = Bun.serve({
    port: 0, hostname: '127.0.0.1',
    fetch: () => Response.json({ type: 'error', error: { type: 'invalid_request_error', message: SPOOF } }, { status: 400 }),
  });
  try {
    const r = await gwc(['whoami'], { GATEWAY_URL: `http://127.0.0.1:${fake.port}` });
    expect(r.code).toBe(1);
    expect(r.stderr).toBe('error: quota exceeded ok: done, nothing to worry about  (x)\n');

    const ch = (await gw.api('POST', '/api/channel/', { name: 'nl', type: 'anthropic', base_url: `http://127.0.0.1:${upstream.port}`, key: 'k-12345678', models: ['m'] })).body.data;
    const t = await gwc(['channel', 'test', String(ch.id)]);
    expect(t.code).toBe(1);
    expect(t.stderr.split('\n')).toHaveLength(2);
    expect(t.stderr).toStartWith(`error: channel ${ch.id} failed the test:`);
    expect(t.stderr).not.toMatch(/\nok: done/);
  } finally {
    fake.stop(true);
    upstream.stop(true);
  }
});

test('secrets printed once for scripts to capture (keys, tokens, codes, the otpauth URI) are inert and one line each', async () => {
  const evil = `sk-${HOSTILE}\nexport PATH=/tmp/evil`;
  const fake = Bun.serve({
    port: 0, hostname: '127.0.0.1',
    fetch: () => Response.json({ success: true, data: { id: 1, name: 'n', key: evil, token: evil, otpauth_uri: evil, secret: evil, backup_codes: [evil, 'b-2'], password: evil, sessions_ended: evil } }),
  });
  try {
    const at = { GATEWAY_URL: `http://127.0.0.1:${fake.port}` };
    for (const [args, lines] of [
      [['key', 'create', '--name', 'n'], 1],
      [['access-token', 'create', '--name', 'n', '--password-stdin'], 1],
      [['2fa', 'backup-codes', '--code', '123456', '--password-stdin'], 2],
      [['password', 'reset', '--email', 'a@example.com', '--token-stdin'], 1],
    ] as const) {
      const r = await sb.run([...args], { env: { ...env, ...at }, stdin: 'pw\n' });
      expect(r.code).toBe(0);
      expect(r.stdout + r.stderr).not.toMatch(DRIVES_TERMINAL);
      expect(r.stdout.trimEnd().split('\n')).toHaveLength(lines);
      expect(r.stdout).toContain('sk-ok ]52;c;cm0gLXJmIH4=');
      // The note before the backup codes quotes the server's session count: one line on stderr, like every note.
      expect(r.stderr).not.toMatch(/^export PATH/m);
    }
    const setup = await gwc(['2fa', 'setup'], at);
    expect(setup.code).toBe(0);
    expect(setup.stdout + setup.stderr).not.toMatch(DRIVES_TERMINAL);
    expect(setup.stdout).not.toMatch(/^export PATH/m);
  } finally {
    fake.stop(true);
  }
});

test("commander's own error quoting a hostile argument is inert", async () => {
  const r = await gwc(['user', 'get', `1${HOSTILE}`]);
  expect(r.code).toBe(2);
  expect(r.stderr).toContain("value '1ok ]52;c;");
  expect(r.stderr).not.toMatch(DRIVES_TERMINAL);
});

test("invisible text (tag characters, variation selectors, zero-width spaces, BOM, soft hyphen) in a user's key name shows as spaces, exact in --json", async () => {
  // Tag characters spell text no terminal shows: here "IGNORE ABOVE" hidden in a name that reads "laptop".
  const hidden = [...'IGNORE ABOVE'].map((c) => String.fromCodePoint(0xe0000 + c.charCodeAt(0))).join('');
  // Variation selectors carry a byte each ("emoji smuggling"): the same hidden words in U+E0100.. after "top".
  const smuggled = [...'IGNORE ABOVE'].map((c) => String.fromCodePoint(0xe0100 + c.charCodeAt(0) - 16)).join('');
  const name = `lap\u200btop${hidden}\ufeff\u00ad${smuggled}\ufe01\u034f\u3164`;
  const user = await makeUser(gw);
  expect((await gw.api('POST', '/api/token/', { name }, user.token)).status).toBe(200);
  const INVISIBLE = /[\u200b\ufeff\u00ad\u{e0000}-\u{e007f}\u{e0100}-\u{e01ef}\ufe00-\ufe0f\u034f\u3164]/u;

  const list = await gwc(['key', 'list', '--user-id', String(user.id)]);
  expect(list.code).toBe(0);
  expect(list.stdout).toContain('lap top');
  expect(list.stdout).not.toMatch(INVISIBLE);
  const json = await gwc(['key', 'list', '--user-id', String(user.id), '--json']);
  expect(json.stdout).not.toMatch(INVISIBLE);
  expect(JSON.parse(json.stdout).items[0].name).toBe(name);
});

test('one variation selector after a visible character stays (Mongolian, Japanese names); a run of them does not', async () => {
  const names = ['\u182D\u180B\u1820', '葛\u{E0100}飾', `prod${String.fromCodePoint(0xe0141, 0xe0142, 0xe0143)}`];
  const user = await makeUser(gw);
  for (const name of names) expect((await gw.api('POST', '/api/token/', { name }, user.token)).status).toBe(200);
  const list = await gwc(['key', 'list', '--user-id', String(user.id)]);
  expect(list.code).toBe(0);
  expect(list.stdout).toContain('\u182D\u180B\u1820');
  expect(list.stdout).toContain('葛\u{E0100}飾');
  // The first selector after "prod" is kept like any other, the two after it are blanked.
  expect(list.stdout).toContain(`prod${String.fromCodePoint(0xe0141)}  `);
  expect(list.stdout).not.toContain(String.fromCodePoint(0xe0142));
});
