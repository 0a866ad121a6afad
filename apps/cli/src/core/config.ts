/**
 * The per-user config file holding the gateway URL and the management access token from `gw login`,
 * and the precedence rules: flags > environment > file.
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join } from 'node:path';
import { UsageError } from './errors';

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
  return join(base, 'ai-gateway', 'config.json');
}

/** Reads the config file; a missing file is an empty config. `warn` gets a note on loose permissions. */
export function readConfig(path: string, warn?: (msg: string) => void): StoredConfig {
  if (!existsSync(path)) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new UsageError(`config file ${path} is not valid JSON (${(e as Error).message}); fix or delete it`);
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new UsageError(`config file ${path} must hold a JSON object`);
  if (warn && process.platform !== 'win32' && (statSync(path).mode & 0o077) !== 0) {
    warn(`warning: ${path} is readable by other users; run: chmod 600 ${path}`);
  }
  return parsed as StoredConfig;
}

/** Writes the config atomically with mode 0600, creating its folder with mode 0700. */
export function writeConfig(path: string, cfg: StoredConfig): void {
  const dir = dirname(path);
  if (!existsSync(dir)) mkdirSync(dir, { recursive: true, mode: 0o700 });
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

/** Validates a gateway URL and strips trailing slashes so URLs compare equal. */
export function normalizeUrl(raw: string): string {
  let u: URL;
  try { u = new URL(raw.trim()); } catch { throw new UsageError(`invalid gateway URL '${raw}' (expected e.g. http://localhost:3000)`); }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new UsageError(`invalid gateway URL '${raw}': only http and https are supported`);
  return u.toString().replace(/\/+$/, '');
}

/** `raw` (a stored URL, maybe invalid) names the gateway `url` (normalised). */
function sameUrl(raw: string, url: string): boolean {
  try { return normalizeUrl(raw) === url; } catch { return false; }
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
  const rawUrl = flags.url ?? env.GATEWAY_URL ?? file.url;
  if (!rawUrl) return undefined;
  const url = normalizeUrl(rawUrl);
  const source: Credentials['source'] = { url: flags.url !== undefined ? 'flag' : env.GATEWAY_URL !== undefined ? 'env' : 'file' };
  let token: string | undefined;
  if (flags.token !== undefined) { token = flags.token; source.token = 'flag'; }
  else if (env.GATEWAY_TOKEN && (!env.GATEWAY_URL || sameUrl(env.GATEWAY_URL, url))) { token = env.GATEWAY_TOKEN; source.token = 'env'; }
  else if (file.token && file.url && sameUrl(file.url, url)) { token = file.token; source.token = 'file'; }
  return { url, token, source };
}
