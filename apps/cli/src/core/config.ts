/**
 * The per-user config file holding the gateway URL and the management access token from `gw login`,
 * and the precedence rules: flags > environment > file.
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, linkSync, lstatSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { basename, dirname, isAbsolute, join } from 'node:path';
import { jsonSyntaxError, UsageError } from './errors';

export type Env = Record<string, string | undefined>;

/** What `gw login` stores. `token_id` lets `gw logout` revoke the token server-side. */
export interface StoredConfig {
  url?: string;
  token?: string;
  token_id?: number;
  username?: string;
}

/** `$GW_CONFIG`, else `$XDG_CONFIG_HOME/ai-gateway/config.json`, else `~/.config/ai-gateway/config.json`. */
export function configPath(env: Env): string {
  if (env.GW_CONFIG) return env.GW_CONFIG;
  const xdg = env.XDG_CONFIG_HOME;
  // The XDG spec says relative values are invalid and must be ignored.
  const base = xdg && isAbsolute(xdg) ? xdg : join(env.HOME || homedir(), '.config');
  return join(base, CONFIG_FOLDER, 'config.json');
}

/** The CLI's own folder under the config home: the only existing folder whose mode it changes. */
const CONFIG_FOLDER = 'ai-gateway';

/** Reads the config file; a missing file is an empty config. `warn` gets a note on loose permissions. */
export function readConfig(path: string, warn?: (msg: string) => void): StoredConfig {
  if (!existsSync(path)) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new UsageError(`config file ${path} is not valid JSON (${jsonSyntaxError(e)}); fix or delete it`);
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new UsageError(`config file ${path} must hold a JSON object`);
  checkFields(path, parsed as Record<string, unknown>);
  if (warn && process.platform !== 'win32') {
    if ((statSync(path).mode & 0o077) !== 0) warn(`warning: ${path} is readable by other users; run: chmod 600 ${path}`);
    // Whoever may write the folder may replace the file (a sticky folder such as /tmp lets no one replace another's):
    // a config naming their URL would receive the token, and the password of a `gw login` without --url.
    const dir = dirname(path);
    const folder = statSync(dir).mode;
    if ((folder & 0o022) !== 0 && (folder & 0o1000) === 0) {
      warn(`warning: ${dir} is writable by other users, who could replace the config file and receive your token; run: chmod 700 ${dir}`);
    }
  }
  return parsed as StoredConfig;
}

/** The type each stored field must have; other fields are left alone (a newer CLI may have written them). */
const FIELD_TYPES: Record<keyof StoredConfig, (v: unknown) => boolean> = {
  url: (v) => typeof v === 'string',
  token: (v) => typeof v === 'string',
  token_id: (v) => Number.isSafeInteger(v) && (v as number) >= 0,
  username: (v) => typeof v === 'string',
};

/**
 * Refuses a stored field of the wrong type (a hand-edited or hostile file): `"url": 5` crashed every command with a
 * TypeError (`internal_error`), and `"token": {…}` went out as `Bearer [object Object]`. The value is not shown.
 */
function checkFields(path: string, cfg: Record<string, unknown>): void {
  for (const [k, ok] of Object.entries(FIELD_TYPES)) {
    const v = cfg[k];
    if (v !== undefined && v !== null && !ok(v)) {
      throw new UsageError(`config file ${path}: "${k}" must be ${k === 'token_id' ? 'a whole number' : 'a string'}; fix or delete it`);
    }
  }
}

/**
 * Creates the config folder with mode 0700, or takes group and other write away from an existing one the user owns
 * (not sticky): whoever may write it could replace the file about to hold the token. Only the CLI's own folder
 * (`…/ai-gateway`) is changed: GW_CONFIG may name a file in a folder shared on purpose (a project checkout, a
 * group's folder), whose mode is not the CLI's to change; that one, like a folder of someone else's, keeps the
 * warning of readConfig. Only the write bits go.
 */
function ensurePrivateFolder(dir: string): void {
  if (!existsSync(dir)) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    return;
  }
  if (process.platform === 'win32' || basename(dir) !== CONFIG_FOLDER) return;
  const st = statSync(dir);
  if ((st.mode & 0o022) !== 0 && (st.mode & 0o1000) === 0 && st.uid === process.getuid?.()) chmodSync(dir, st.mode & 0o7755);
}

/** Writes the config atomically with mode 0600, creating its folder with mode 0700 (or tightening it). */
export function writeConfig(path: string, cfg: StoredConfig): void {
  const dir = dirname(path);
  ensurePrivateFolder(dir);
  // An unguessable name, created new ('wx': O_EXCL, which also refuses a symlink) and 0600 from the start: a
  // file or link planted in a shared folder never receives the token, and no file is written through a link.
  const tmp = `${path}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(cfg, null, 2)}\n`, { mode: 0o600, flag: 'wx' });
  try {
    chmodSync(tmp, 0o600);
    renameSync(tmp, path);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw e;
  }
}

/** How long a gw process waits for another's config write, and the age at which a lock is taken as left behind. */
const LOCK_WAIT_MS = 10_000;
const LOCK_STALE_MS = 30_000;

/**
 * Read-modify-write of the config file under a lock file (`<path>.lock`, created O_EXCL, held for the
 * milliseconds of one read and write): `change` gets the file as it is now, not as this process read it
 * at its start, and returns what to write (undefined: leave it). Two logins, or a login and a logout, then
 * each see the other's token and can revoke it, instead of the last writer dropping a live token unseen.
 *
 * The lock holds a random token of its holder. A lock older than 30 s (left by a killed gw) is taken over by
 * moving it aside (rename: one process gets it) and removing it only if it is still the lock judged old; the
 * holder removes the lock only while it holds its own token. Before, two processes taking over one old lock at
 * once each removed "it" (the second removing the lock the first had just created) and both held the lock.
 */
export async function updateConfig(path: string, change: (current: StoredConfig) => StoredConfig | undefined): Promise<void> {
  const dir = dirname(path);
  ensurePrivateFolder(dir);
  const lock = `${path}.lock`;
  const mine = randomBytes(12).toString('hex');
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
      writeFileSync(lock, mine, { mode: 0o600, flag: 'wx' });
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    if (!takeOverStale(lock, mine)) {
      if (Date.now() > deadline) throw new UsageError(`config file ${path} is locked by another gw process; if none is running, delete ${lock}`);
      await new Promise((r) => setTimeout(r, 10 + Math.random() * 40));
    }
  }
  try {
    const next = change(readConfig(path));
    if (next) writeConfig(path, next);
  } finally {
    if (readLock(lock) === mine) rmSync(lock, { force: true });
  }
}

/** The lock's content (its holder's token), or null when there is none (or it is not a readable file). */
function readLock(lock: string): string | null {
  try { return readFileSync(lock, 'utf8'); } catch { return null; }
}

/** Removes `lock` if it was left behind (older than LOCK_STALE_MS); true when it did (try to create it again). */
function takeOverStale(lock: string, mine: string): boolean {
  let st;
  try { st = lstatSync(lock); } catch { return true; } // gone meanwhile
  if (Date.now() - st.mtimeMs <= LOCK_STALE_MS) return false;
  // Moved aside by rename (atomic), then checked: the file moved is the old one (same inode and age), or a
  // fresh lock another process created after taking over the same old one, which is put back.
  const aside = `${lock}.${mine}.stale`;
  try {
    renameSync(lock, aside);
  } catch (e) {
    // Gone: another process moved it first, so try again at once. Any other refusal (another user's lock in a sticky
    // folder, a folder this user may not write, a name too long for `aside`) comes back on every try: the lock counts as
    // held, so the wait ends at its deadline with the message naming the lock. Before, gw retried at once forever.
    return (e as NodeJS.ErrnoException).code === 'ENOENT';
  }
  const moved = lstatSync(aside);
  if (moved.ino === st.ino && moved.mtimeMs === st.mtimeMs) {
    rmSync(aside, { force: true });
    return true;
  }
  try { linkSync(aside, lock); } catch { /* a third process created one meanwhile: it holds the lock */ }
  rmSync(aside, { force: true });
  return false;
}

/**
 * `raw` as an error message may show it: the userinfo (anything before an `@` ahead of the path) replaced, since a
 * URL refused for its scheme or port may still hold a password, and GATEWAY_URL's errors land in CI logs.
 */
export const shownUrl = (raw: string): string => raw.replace(/^([^:/?#@]*:[/\\]*)?[^/\\?#]*@/, '$1***@');

/** Validates a gateway URL and strips trailing slashes so URLs compare equal. */
export function normalizeUrl(raw: string): string {
  let u: URL;
  try { u = new URL(raw.trim()); } catch { throw new UsageError(`invalid gateway URL '${shownUrl(raw)}' (expected e.g. http://localhost:3000)`); }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new UsageError(`invalid gateway URL '${shownUrl(raw)}': only http and https are supported`);
  // The URL is stored in the config file (`gw login`) and shown by whoami; a password in it would sit there in clear.
  // Not echoed: the message must not print the password either.
  if (u.username || u.password) {
    throw new UsageError(`the gateway URL must not contain credentials (user:password@${u.host}): remove them from --url, GATEWAY_URL or the config file, and log in with -u and --password-stdin`);
  }
  // Route paths are appended to the URL as text: after a `?` or `#` they would be query or fragment, and every
  // command would reach the URL's own path instead (`gw health` read `/` and said ok).
  if (u.search || u.hash || /[?#]/.test(raw)) throw new UsageError(`invalid gateway URL '${shownUrl(raw)}': no query (?) or fragment (#); give the gateway's origin, e.g. https://gw.example.com`);
  return u.toString().replace(/\/+$/, '');
}

/**
 * `url` (normalised) is plain http to another machine: whatever is sent there (a token, a password) crosses the
 * network readable by anyone on the path. Loopback (`localhost`, `*.localhost`, 127.0.0.0/8, `[::1]`) never leaves it.
 */
export function plainHttpElsewhere(url: string): boolean {
  const u = new URL(url);
  if (u.protocol !== 'http:') return false;
  const host = u.hostname.toLowerCase();
  return !(host === 'localhost' || host.endsWith('.localhost') || host === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(host));
}

/** `raw` (a stored URL, maybe invalid) names the gateway `url` (normalised). */
export function sameUrl(raw: string, url: string): boolean {
  try { return normalizeUrl(raw) === url; } catch { return false; }
}

/**
 * The gateway URL as given, by --url > GATEWAY_URL > the config file. An empty variable is an unset one
 * (`GATEWAY_URL=${GATEWAY_URL}` in a compose file or CI template): it hid the config file's URL and the CLI said
 * "no gateway URL".
 */
export function rawGatewayUrl(flags: { url?: string }, env: Env, file: StoredConfig): string | undefined {
  return flags.url ?? (env.GATEWAY_URL || undefined) ?? file.url;
}

export interface Credentials {
  url: string;
  token?: string;
  /** Where each value came from, for `whoami` and error messages. */
  source: { url: 'flag' | 'env' | 'file'; token?: 'flag' | 'env' | 'file' };
}

/**
 * Resolves URL and token, each by flags > env > file. A stored token is only used for the URL stored with it:
 * the file's for the file's URL, and GATEWAY_TOKEN, when GATEWAY_URL is set, for GATEWAY_URL. Pointing the CLI
 * at another gateway with --url must not send it that gateway's token (GATEWAY_TOKEN alone goes to any URL).
 */
export function resolveCredentials(flags: { url?: string; token?: string }, env: Env, file: StoredConfig): Credentials | undefined {
  const envUrl = env.GATEWAY_URL || undefined;
  const rawUrl = rawGatewayUrl(flags, env, file);
  if (!rawUrl) return undefined;
  const url = normalizeUrl(rawUrl);
  const source: Credentials['source'] = { url: flags.url !== undefined ? 'flag' : envUrl !== undefined ? 'env' : 'file' };
  let token: string | undefined;
  if (flags.token !== undefined) { token = flags.token; source.token = 'flag'; }
  else if (env.GATEWAY_TOKEN && (!env.GATEWAY_URL || sameUrl(env.GATEWAY_URL, url))) { token = env.GATEWAY_TOKEN; source.token = 'env'; }
  else if (file.token && file.url && sameUrl(file.url, url)) { token = file.token; source.token = 'file'; }
  if (token !== undefined) token = checkedToken(token, source.token!);
  return { url, token, source };
}

const TOKEN_SOURCE = { flag: '--token', env: 'GATEWAY_TOKEN', file: 'the config file' } as const;

/**
 * The token as it goes into the Authorization header: surrounding whitespace dropped (a token file saved with CRLF
 * line ends keeps its `\r` through `$(cat file)`), and refused (exit 2, not echoed: it is a secret) when it holds a
 * character no token the gateway issues has. Before, fetch refused the header and the CLI said "cannot reach the
 * gateway" (exit 3), sending the operator after the network instead of the token.
 */
export function checkedToken(token: string, source: keyof typeof TOKEN_SOURCE): string {
  const t = token.trim();
  if (!/^[\x21-\x7e]*$/.test(t)) {
    throw new UsageError(`the access token from ${TOKEN_SOURCE[source]} holds characters no token has (spaces, control or non-ASCII characters); check it`);
  }
  return t;
}
