/** `login`, `logout`, `whoami`: getting a management access token into the config file and out again. */
import { hostname } from 'node:os';
import { Option, type Command } from 'commander';
import { ApiClient, unwrap } from '../core/client';
import { normalizeUrl, rawGatewayUrl, sameUrl, updateConfig, type StoredConfig } from '../core/config';
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
    .addOption(new Option('--revoke-idle-days <n>', `first revoke your tokens made by \`gw login\` (named ${LOGIN_TOKEN_PREFIX}…) unused for n days`).argParser(parseId))
    .addHelpText('after', `
A user holds at most 50 live access tokens and each login mints one. Logging in again with the same config
file revokes the token it held; \`gw logout\` revokes it too. Logins from fresh config files (CI jobs, new
machines) that never log out pile up: use --expires-in-days, or --revoke-idle-days when the limit is met.

Examples:
  $ gw login --url http://localhost:3000 -u root
  $ printf '%s\\n' "$PASSWORD" | gw login --url https://gw.example.com -u ops --password-stdin --totp 123456
  $ gw login -u ops --revoke-idle-days 30`)
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
  const rawUrl = rawGatewayUrl(ctx.globals, ctx.io.env, file);
  if (!rawUrl) throw new UsageError('no gateway URL: pass --url <url> or set GATEWAY_URL');
  const url = normalizeUrl(rawUrl);
  ctx.warnPlainHttp(url);
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
  // The config's previous token for this gateway: a new login replaces it.
  const old = storedToken(file, url);
  const revokeOld = () => revoke(url, old!);
  const mint = () => anon.call<{ id: number; token: string }>('POST', '/api/user/access_token', { ...session, body })
    .catch(async (e) => { throw tooManyTokens(e) ? await atTheLimit(e, anon, session) : e; });
  let created: { id: number; token: string };
  try {
    if (opts.revokeIdleDays) await revokeIdle(ctx, anon, session, opts.revokeIdleDays, password);
    try {
      created = await mint();
    } catch (e) {
      // At the limit, the token being replaced makes the room (at the cost of a second password check), when it is
      // this user's: a config holding another user's token (`gw login -u other`) would lose it for no room at all.
      if (!old || !tooManyTokens(e) || !(await liveTokens(anon, session).catch(() => [])).some((t) => t.id === file.token_id)) throw e;
      await revokeOld();
      created = await mint();
    }
  } finally {
    // The session was only needed to mint the token; end it either way.
    await anon.raw('POST', '/api/user/logout', session).catch(() => undefined);
  }

  // A re-login replaces the stored token: revoke the old one so tokens do not pile up.
  if (old) await revokeOld();
  // Another login with this file may have stored its token since it was read: that one is replaced too, so it is
  // revoked as well (left live, no config would hold it). Read and written under the file's lock.
  let replaced: { token: string; id: number } | undefined;
  await updateConfig(ctx.configPath, (current) => {
    replaced = storedToken(current, url);
    return { url, token: created.token, token_id: created.id, username: user.username };
  });
  if (replaced && replaced.id !== old?.id) await revoke(url, replaced);
  ctx.print(user, () => `Logged in to ${url} as ${user.username} (${roleName(user.role)}). Access token saved to ${ctx.configPath}.\n`);
  return 0;
}

/** The config's token when it is for the gateway `url` (a token of another gateway is not replaced by this login). */
function storedToken(cfg: StoredConfig, url: string): { token: string; id: number } | undefined {
  return cfg.token && cfg.token_id && cfg.url && sameUrl(cfg.url, url) ? { token: cfg.token, id: cfg.token_id } : undefined;
}

/** Revokes a token with itself (whoever's it is); one already revoked or unreachable is left as it is. */
const revoke = (url: string, t: { token: string; id: number }) =>
  new ApiClient({ url, token: t.token }).raw('DELETE', `/api/user/access_token/${t.id}`).catch(() => undefined);

const tooManyTokens = (e: unknown) => e instanceof ApiError && e.status === 409 && e.code === 'too_many_access_tokens';

interface TokenRow { id: number; name: string; created_at: number; expires_at: number | null; last_used_at: number | null; revoked: boolean }

/** The caller's live tokens, listed with the login session. */
async function liveTokens(anon: ApiClient, session: { headers: Record<string, string> }): Promise<TokenRow[]> {
  const now = Date.now() / 1000;
  const rows = await anon.call<TokenRow[]>('GET', '/api/user/access_token', session);
  return rows.filter((t) => !t.revoked && (t.expires_at === null || t.expires_at > now));
}

/** The caller's live tokens made by `gw login`. */
async function liveLoginTokens(anon: ApiClient, session: { headers: Record<string, string> }): Promise<TokenRow[]> {
  return (await liveTokens(anon, session)).filter((t) => t.name.startsWith(LOGIN_TOKEN_PREFIX));
}

/**
 * `--revoke-idle-days`: revokes the caller's login-made tokens not used (or, never used, not created) within
 * `days`. Only tokens named by `gw login`: a token made for a script has a name of its own and is never touched.
 * All in one call on one password check (the gateway asks it for any token but the calling one).
 */
async function revokeIdle(ctx: Ctx, anon: ApiClient, session: { headers: Record<string, string> }, days: number, password: string): Promise<void> {
  const cutoff = Date.now() / 1000 - days * 86_400;
  const idle = (await liveLoginTokens(anon, session)).filter((t) => (t.last_used_at ?? t.created_at) < cutoff);
  if (!idle.length) return;
  // Another login listing the same idle tokens at once may have revoked some of them first: the gateway counts
  // those as done and answers how many this call revoked.
  const { tokens_revoked: n } = await anon.call<{ tokens_revoked: number }>('POST', '/api/user/access_token/revoke', { ...session, body: { ids: idle.map((t) => t.id), current_password: password } });
  const of = n < idle.length ? ` of ${idle.length}` : '';
  const ended = n < idle.length ? ` (the other ${idle.length - n} had already ended)` : '';
  ctx.note(`Revoked ${n}${of} access token${idle.length === 1 ? '' : 's'} made by \`gw login\` and unused for ${days} days${ended}: ${idle.map((t) => t.id).join(', ')}.\n`);
}

/**
 * The refusal at the token limit, with what to do about it: without a token, `gw access-token revoke` is out
 * of reach, so the way out has to be part of `gw login`.
 */
async function atTheLimit(e: ApiError, anon: ApiClient, session: { headers: Record<string, string> }): Promise<ApiError> {
  const mine = await liveLoginTokens(anon, session).catch(() => undefined);
  const made = mine ? ` (${mine.length} of them made by \`gw login\`)` : '';
  const err = new ApiError(e.status, e.code, `${e.message}${made}. Log in with --revoke-idle-days <n> to revoke login tokens unused for n days, or revoke tokens with \`gw access-token revoke <id>\` from another login`, e.param);
  err.server = e.server;
  return err;
}

/** Every token `gw login` names starts with this (unless --token-name). */
const LOGIN_TOKEN_PREFIX = 'gw-cli@';

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
  return `${LOGIN_TOKEN_PREFIX}${host.slice(0, TOKEN_NAME_MAX - LOGIN_TOKEN_PREFIX.length - tail.length)}${tail}`;
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
  ctx.warnPlainHttp(client.url);
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
  // Under the file's lock, and only while it still holds the token revoked here: a login that stored a new
  // one meanwhile keeps it (dropped, it would stay live with no config holding it).
  await updateConfig(ctx.configPath, (current) => (current.token === file.token ? { url: file.url } : undefined));
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
