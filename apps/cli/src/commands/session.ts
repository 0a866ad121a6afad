/** `login`, `logout`, `whoami`: getting a management access token into the config file and out again. */
import { hostname } from 'node:os';
import { Option, type Command } from 'commander';
import { ApiClient, unwrap } from '../core/client';
import { normalizeUrl, writeConfig, type StoredConfig } from '../core/config';
import type { App, Ctx } from '../core/context';
import { ApiError, UnreachableError, UsageError } from '../core/errors';
import { parseId } from '../core/fields';
import { readSecret } from '../core/secrets';
import { apiParams } from '../core/params';
import { details, roleName, statusName } from '../core/output';

export function registerSession(program: Command, app: App): void {
  apiParams(program.command('login'), { totp_code: { flag: '--totp' } })
    .description('Log in with username and password; stores a management access token in the config file')
    .option('-u, --username <name>', 'user to log in as (prompted when omitted on a terminal)')
    .option('--password-stdin', 'read the password from the first line of stdin')
    .option('--password <password>', 'the password on the command line (last resort: visible in shell history and ps)')
    .option('--totp <code>', 'two-factor code (TOTP or backup code); prompted when needed on a terminal')
    .option('--token-name <name>', 'name of the access token to create (default: gw-cli@<host> <UTC minute> <random>, unique per login)')
    .addOption(new Option('--expires-in-days <n>', 'token lifetime in days (default: no expiry)').argParser(parseId))
    .addHelpText('after', `
Examples:
  $ gw login --url http://localhost:3000 -u root
  $ printf '%s\\n' "$PASSWORD" | gw login --url https://gw.example.com -u ops --password-stdin --totp 123456`)
    .action(app.action(login));

  program.command('logout')
    .description('Revoke the stored access token on the server (when reachable) and forget it locally (the URL is kept)')
    .addHelpText('after', '\nExample:\n  $ gw logout')
    .action(app.action(logout));

  program.command('whoami')
    .description('Show the user the current credentials belong to')
    .addHelpText('after', '\nExamples:\n  $ gw whoami\n  $ GATEWAY_TOKEN=gwm_... gw whoami --url https://gw.example.com --json')
    .action(app.action(whoami));
}

async function login(ctx: Ctx, _args: unknown[], opts: Record<string, any>): Promise<number> {
  const file = ctx.readConfig();
  const rawUrl = ctx.globals.url ?? ctx.io.env.GATEWAY_URL ?? file.url;
  if (!rawUrl) throw new UsageError('no gateway URL: pass --url <url> or set GATEWAY_URL');
  const url = normalizeUrl(rawUrl);
  let username: string | undefined = opts.username;
  if (!username) {
    if (!ctx.io.interactive || opts.passwordStdin) throw new UsageError('missing --username');
    username = await ctx.io.prompt('Username: ');
  }
  const password = (await readSecret(ctx, {
    stdin: opts.passwordStdin, value: opts.password, prompt: 'Password: ', required: 'no password: stdin is not a terminal; use --password-stdin',
  }))!;
  const anon = new ApiClient({ url });

  let totp: string | undefined = opts.totp;
  let res = await anon.raw('POST', '/api/user/login', { body: { username, password, totp_code: totp } });
  // Off a terminal the refusal itself says what to do: "--totp: Two-factor code required".
  if (res.status === 401 && res.body?.error?.code === 'totp_required' && !totp && ctx.io.interactive && !opts.passwordStdin) {
    totp = await ctx.io.prompt('Two-factor code: ');
    res = await anon.raw('POST', '/api/user/login', { body: { username, password, totp_code: totp } });
  }
  const user = unwrap(res) as Record<string, any>;
  const cookie = sessionCookie(res.headers);
  if (!cookie) throw new ApiError(res.status, 'no_session', 'the server accepted the login but sent no session cookie');

  const session = { headers: { cookie } };
  // The gateway wants the password again to mint a token (a session alone may not outlive itself).
  const body: Record<string, unknown> = { name: opts.tokenName ?? loginTokenName(hostname(), new Date()), current_password: password };
  if (opts.expiresInDays) body.expires_in_days = opts.expiresInDays;
  let created: { id: number; token: string };
  try {
    created = await anon.call('POST', '/api/user/access_token', { ...session, body });
  } finally {
    // The session was only needed to mint the token; end it either way.
    await anon.raw('POST', '/api/user/logout', session).catch(() => undefined);
  }

  // A re-login replaces the stored token: revoke the old one so tokens do not pile up.
  if (file.token && file.token_id && file.url && normalizeUrl(file.url) === url) {
    await new ApiClient({ url, token: file.token }).raw('DELETE', `/api/user/access_token/${file.token_id}`).catch(() => undefined);
  }
  const cfg: StoredConfig = { url, token: created.token, token_id: created.id, username: user.username };
  writeConfig(ctx.configPath, cfg);
  ctx.print(user, () => `Logged in to ${url} as ${user.username} (${roleName(user.role)}). Access token saved to ${ctx.configPath}.\n`);
  return 0;
}

/** Longest access token name the gateway accepts. */
const TOKEN_NAME_MAX = 64;

/**
 * A name that tells this login's token apart from the others in `gw access-token list`, so the operator
 * can revoke one: host, UTC minute and a random suffix (two logins in the same minute still differ).
 * The host is shortened so the whole name fits.
 */
export function loginTokenName(host: string, now: Date): string {
  const stamp = `${now.toISOString().slice(0, 16)}Z`;
  const suffix = crypto.getRandomValues(new Uint8Array(3)).reduce((s, b) => s + b.toString(16).padStart(2, '0'), '');
  const tail = ` ${stamp} ${suffix}`;
  return `gw-cli@${host.slice(0, TOKEN_NAME_MAX - 'gw-cli@'.length - tail.length)}${tail}`;
}

/** The `name=value` part of the session cookie from a login answer. */
function sessionCookie(h: Headers): string | undefined {
  const all = typeof h.getSetCookie === 'function' ? h.getSetCookie() : [h.get('set-cookie') ?? ''];
  const first = all.find((c) => c.includes('='));
  return first?.split(';')[0]?.trim() || undefined;
}

async function logout(ctx: Ctx): Promise<number> {
  const file = ctx.readConfig();
  if (!file.token || !file.url) {
    ctx.print({ url: file.url ?? null, revoked: false }, () => 'Not logged in.\n');
    return 0;
  }
  const client = new ApiClient({ url: normalizeUrl(file.url), token: file.token, timeoutMs: 10_000 });
  let revoked = false;
  try {
    let id = file.token_id;
    if (!id) {
      const list = await client.call<{ id: number; prefix: string }[]>('GET', '/api/user/access_token');
      id = list.find((t) => file.token!.startsWith(t.prefix))?.id;
    }
    if (id) { await client.call('DELETE', `/api/user/access_token/${id}`); revoked = true; }
  } catch (e) {
    // An already revoked/expired token is the goal anyway; anything else is worth a warning.
    if (e instanceof ApiError && e.status === 401) revoked = true;
    else if (e instanceof UnreachableError || e instanceof ApiError) ctx.note(`warning: could not revoke the token on the server (${e.message}); it stays valid until revoked or expired\n`);
    else throw e;
  }
  // The URL stays (it is no secret): `gw login` needs no --url next time, and `gw whoami` can say
  // "not logged in to <url>" (exit 1) or that the gateway is unreachable (exit 3).
  writeConfig(ctx.configPath, { url: file.url });
  ctx.print({ url: file.url, revoked }, () => `Logged out of ${file.url}${revoked ? '; access token revoked' : ''}.\n`);
  return 0;
}

async function whoami(ctx: Ctx): Promise<number> {
  const client = ctx.client();
  const creds = ctx.credentials();
  const u = await client.call('GET', '/api/user/self');
  ctx.print(u, () => details([
    ['user', `${u.username} (id ${u.id})`],
    ['display name', u.display_name],
    ['role', roleName(u.role)],
    ['status', statusName(u.status)],
    ['group', u.group],
    ['quota', u.quota],
    ['used quota', u.used_quota],
    ['2fa', u.totp_enabled],
    ['gateway', `${client.url} (from ${creds.source.url})`],
    ['token from', creds.source.token],
  ]));
  return 0;
}
