/**
 * Configuration, read once from the environment at start-up and validated there: a bad value
 * stops the process with a one-line reason instead of failing later on a request.
 */
import { chmodSync, lstatSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { availableParallelism } from 'node:os';
import { LOG_FORMATS, LOG_LEVELS, fsErrorCause, writableFileProblem, type LogFormat, type LogLevel } from '@gw/core';

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** Which storage DATABASE_URL selects: one process on a SQLite file, or N nodes on PostgreSQL + Redis. */
export type DbKind = 'sqlite' | 'postgres';

export interface Config {
  port: number;
  host: string;
  /** `sqlite:<path>`, `sqlite::memory:` or `postgres://…` / `postgresql://…`. May hold a password: log `redactUrl(databaseUrl)`. */
  databaseUrl: string;
  /** Chosen by the scheme of DATABASE_URL. */
  dbKind: DbKind;
  /** Filesystem path of the SQLite database, or ':memory:'; '' in postgres mode (branch on `dbKind` first). */
  sqlitePath: string;
  /** PG_SCHEMA: schema holding the tables in postgres mode (each test run uses its own). Default `public`. */
  pgSchema: string;
  /** REDIS_URL (`redis://` or `rediss://`); required in postgres mode, where Redis arbitrates holds and limits. */
  redisUrl: string | null;
  /** REDIS_PREFIX: prefix of every Redis key this gateway writes (clusters or test runs sharing a server). Default `gw:`. */
  redisPrefix: string;
  /** WORKERS: gateway processes on this host; more than 1 needs postgres mode. Default 1. */
  workers: number;
  /** CHANGE_FEED_RESYNC_MS: postgres mode's safety reload of every cache and listener heartbeat period. Default 30000. */
  changeFeedResyncMs: number;
  /** PG_SILENCE_MS: a pool connection waiting this long for any answer is closed as dead; 0 = never. Default 30000. */
  pgSilenceMs: number;
  /** REDIS_SILENCE_MS: the Redis connection, with commands waiting and nothing received this long, is replaced; 0 = never. Default 5000. */
  redisSilenceMs: number;
  rootUsername: string;
  /** Undefined: generate one on first start and print it once. */
  rootPassword?: string;
  /** 32-byte key for secrets at rest (channel keys, TOTP secrets). */
  secretKey: Uint8Array;
  /** Largest request body accepted, in bytes (413 above). */
  maxBodyBytes: number;
  /** Largest body accepted before authentication, on public routes (login, password reset, webhooks). */
  anonMaxBodyBytes: number;
  /** Deepest JSON nesting accepted in any request body (400 `json_too_deep` above). */
  jsonMaxDepth: number;
  /** Longest a request body may take to arrive, from the request's start (408 `body_timeout` after). */
  bodyTimeoutMs: number;
  /** API keys one user may hold (409 `too_many_keys` above); 0 = unlimited. */
  maxKeysPerUser: number;
  sessionTtlSeconds: number;
  /** Secure flag on the session cookie (set when served over HTTPS). */
  cookieSecure: boolean;
  /** Login protection: failures before a lock, base lock seconds (doubles each time), per-IP attempts per minute. */
  loginMaxFailures: number;
  loginLockSeconds: number;
  loginIpPerMinute: number;
  /** Password hashes/verifies at once on this node, callers that may wait for one, and checks per account per minute. */
  passwordHashSlots: number;
  passwordHashQueue: number;
  /** HISTORY_READS_QUEUE: history reads that may wait for the node's history slots; more are refused (503). */
  historyReadsQueue: number;
  /** HISTORY_QUERY_TIMEOUT_MS: the longest one history query (listing page, export page, statistics) may run. */
  historyQueryTimeoutMs: number;
  passwordChecksPerMinute: number;
  /** PostgreSQL mode: attempt-count statements waiting for one of the process's 2 slots; one more is 503 at once. */
  attemptChecksQueue: number;
  /**
   * LISTEN_REUSE_PORT: bind with SO_REUSEPORT so several processes can share the port on purpose.
   * Off by default: a second gateway on a busy port must fail loudly, not get half the traffic.
   */
  reusePort: boolean;
  /** Seconds the server waits on an idle connection (streams send pings well inside this). */
  idleTimeoutSeconds: number;
  /** TRUST_PROXY: take the client address from X-Forwarded-For (only behind the operator's own proxy). */
  trustProxy: boolean;
  /** TRUST_PROXY_HOPS: the number of the operator's proxies that append to X-Forwarded-For (0 = leftmost entry; default 1 with TRUST_PROXY on). */
  trustProxyHops: number;
  /** Log requests to stdout. */
  logRequests: boolean;
  /**
   * TLS_CERT_FILE / TLS_KEY_FILE: PEM certificate (chain) and private key, read once at start-up; the
   * gateway then serves HTTPS and WSS itself on PORT. Null = plain HTTP.
   */
  tls: { cert: string; key: string } | null;
  /**
   * LOOP_DELAY_SAMPLE_MS: sample the event loop's delay every N ms and export it on /metrics as
   * gateway_event_loop_delay_seconds{quantile}; 0 (default) = off, no timer at all.
   */
  loopDelaySampleMs: number;
  /** LOG_LEVEL: lowest level written (debug, info, warn, error). */
  logLevel: LogLevel;
  /** LOG_FORMAT: `text` (`time level event key=value…`) or `json` (one object per line). */
  logFormat: LogFormat;
  /** Unparsed environment, for feature modules that read their own optional settings. */
  env: Record<string, string | undefined>;
}

function int(env: Record<string, string | undefined>, name: string, def: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return def;
  if (!/^-?\d+$/.test(raw.trim())) throw new ConfigError(`${name} must be an integer, got "${raw}"`);
  const v = Number(raw);
  if (v < min || v > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${v}`);
  return v;
}

function bool(env: Record<string, string | undefined>, name: string, def: boolean): boolean {
  const raw = env[name]?.trim().toLowerCase();
  if (raw === undefined || raw === '') return def;
  if (['1', 'true', 'yes', 'on'].includes(raw)) return true;
  if (['0', 'false', 'no', 'off'].includes(raw)) return false;
  throw new ConfigError(`${name} must be true or false, got "${env[name]}"`);
}

/**
 * TRUST_PROXY_HOPS alone turns TRUST_PROXY on; with TRUST_PROXY explicitly off it is a contradiction. Unset with
 * TRUST_PROXY on it is 1 (the rightmost entry, the one the operator's proxy added): the leftmost is whatever the
 * client sent, and taking it let any client pick the address its per-IP limits, allow_ips and logs went by.
 * 0 (the leftmost) is an explicit choice, right only behind a proxy that overwrites the header.
 */
function trustProxyHops(env: Record<string, string | undefined>): number {
  const hops = int(env, 'TRUST_PROXY_HOPS', bool(env, 'TRUST_PROXY', false) ? 1 : 0, 0, 16);
  if (hops > 0 && env.TRUST_PROXY?.trim() && !bool(env, 'TRUST_PROXY', false)) {
    throw new ConfigError(`TRUST_PROXY_HOPS=${hops} needs TRUST_PROXY on (or unset), got TRUST_PROXY="${env.TRUST_PROXY}"`);
  }
  return hops;
}

function oneOf<T extends string>(env: Record<string, string | undefined>, name: string, allowed: readonly T[], def: T): T {
  const raw = env[name]?.trim().toLowerCase();
  if (raw === undefined || raw === '') return def;
  if (!(allowed as readonly string[]).includes(raw)) throw new ConfigError(`${name} must be one of ${allowed.join(', ')}, got "${env[name]}"`);
  return raw as T;
}

/** Where the database lives when DATABASE_URL is unset. */
export const DEFAULT_DATABASE_URL = 'sqlite:./data/gateway.db';

/** The URL with its password (and any `password=` parameter) replaced by `***`, for logs and messages. */
export function redactUrl(url: string): string {
  return url
    .replace(/^([a-z][a-z0-9+.-]*:\/\/[^:@/?#]*:)[^@/?#]*@/i, '$1***@')
    .replace(/([?&]password=)[^&#]*/i, '$1***');
}

const POSTGRES_URL = /^postgres(ql)?:\/\//i;

/** Checks a postgres:// URL enough to fail at start-up rather than at the first connection. */
function checkPostgresUrl(url: string): void {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new ConfigError(`DATABASE_URL is not a valid PostgreSQL URL: "${redactUrl(url)}"`);
  }
  // A Unix socket is given as ?host=/path, with an empty host part.
  if (!u.hostname && !u.searchParams.get('host')) throw new ConfigError(`DATABASE_URL names no PostgreSQL host: "${redactUrl(url)}"`);
}

/** The SQLite path of a DATABASE_URL (`:memory:` for the in-memory database); ConfigError when malformed. */
function parseSqliteUrl(url: string): string {
  const m = /^sqlite:(.+)$/.exec(url);
  if (!m) throw new ConfigError(`DATABASE_URL must look like sqlite:./data/gateway.db, sqlite::memory: or postgres://user@host:5432/db, got "${redactUrl(url)}"`);
  const path = m[1]!.replace(/^\/\/(?=\/)/, '');
  return path === ':memory:' ? ':memory:' : path;
}

/** SECRET_KEY's 32 bytes, from 64 hex characters or base64. */
function parseSecretKey(raw: string): Uint8Array {
  const bytes = /^[0-9a-fA-F]{64}$/.test(raw) ? Buffer.from(raw, 'hex') : Buffer.from(raw, 'base64');
  if (bytes.length !== 32) throw new ConfigError('SECRET_KEY must be 32 bytes as 64 hex characters or base64');
  return new Uint8Array(bytes);
}

/** Reads SECRET_KEY (hex or base64 of 32 bytes); without it, a key file beside the database is created once. */
function secretKey(env: Record<string, string | undefined>, sqlitePath: string): Uint8Array {
  const raw = env.SECRET_KEY?.trim();
  if (raw) return parseSecretKey(raw);
  if (sqlitePath === ':memory:') return crypto.getRandomValues(new Uint8Array(32));
  const file = join(dirname(sqlitePath), 'secret.key');
  const st = lstatSync(file, { throwIfNoEntry: false });
  if (st) {
    // Never through a link: in a shared folder it could make us chmod and read another file as our key.
    if (st.isSymbolicLink()) throw new ConfigError(`${file} is a symbolic link; put the key file itself there or set SECRET_KEY`);
    chmodSync(file, 0o600); // a key file left readable by an older version is tightened
    return new Uint8Array(Buffer.from(readFileSync(file, 'utf8').trim(), 'hex'));
  }
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  const key = crypto.getRandomValues(new Uint8Array(32));
  writeFileSync(file, Buffer.from(key).toString('hex'), { mode: 0o600, flag: 'wx' });
  return key;
}

/** Reads the TLS certificate and key files: both or neither, readable, PEM. */
function tlsFiles(env: Record<string, string | undefined>): { cert: string; key: string } | null {
  const certFile = env.TLS_CERT_FILE?.trim();
  const keyFile = env.TLS_KEY_FILE?.trim();
  if (!certFile && !keyFile) return null;
  if (!certFile || !keyFile) throw new ConfigError('TLS_CERT_FILE and TLS_KEY_FILE are set together (or neither)');
  const read = (name: string, file: string, what: RegExp) => {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (e) {
      throw new ConfigError(`${name}: cannot read ${file} (${(e as NodeJS.ErrnoException)?.code ?? e})`);
    }
    if (!what.test(text)) throw new ConfigError(`${name}: ${file} is not a PEM file`);
    return text;
  };
  return {
    cert: read('TLS_CERT_FILE', certFile, /-----BEGIN CERTIFICATE-----/),
    key: read('TLS_KEY_FILE', keyFile, /-----BEGIN [A-Z ]*PRIVATE KEY-----/),
  };
}

/**
 * Checks that the database file can be opened before anything is written beside it (the key file), and
 * creates its folder: a new data folder is private (0700); an existing one keeps its mode (it may be
 * shared, e.g. /tmp). Failures name the path and the cause, which SQLite's own message does not.
 */
function prepareDataFolder(path: string) {
  const fail = (cause: string) => new ConfigError(`DATABASE_URL: cannot open database file ${path}: ${cause}`);
  const problem = writableFileProblem(path, { createParents: true });
  if (problem) throw fail(problem);
  try {
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  } catch (e) {
    throw fail(`cannot create its folder ${dirname(path)}: ${fsErrorCause(e)}`);
  }
}

/** PG_SCHEMA: a plain identifier (it goes into search_path and DDL). */
function pgSchemaName(env: Record<string, string | undefined>): string {
  const raw = env.PG_SCHEMA?.trim();
  if (!raw) return 'public';
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(raw)) throw new ConfigError(`PG_SCHEMA must be 1-63 lowercase letters, digits or _ (not starting with a digit), got "${raw}"`);
  return raw;
}

function redisSettings(env: Record<string, string | undefined>): { redisUrl: string | null; redisPrefix: string } {
  const redisUrl = env.REDIS_URL?.trim() || null;
  if (redisUrl !== null && !/^rediss?:\/\/./i.test(redisUrl)) throw new ConfigError(`REDIS_URL must look like redis://host:6379 or rediss://host:6380, got "${redactUrl(redisUrl)}"`);
  const prefix = env.REDIS_PREFIX ?? 'gw:';
  // Braces would open a hash tag of their own and move keys off the slot their scripts expect.
  if (!/^[A-Za-z0-9_:.-]{0,64}$/.test(prefix)) throw new ConfigError(`REDIS_PREFIX must be up to 64 letters, digits or _ : . -, got "${prefix}"`);
  return { redisUrl, redisPrefix: prefix };
}

/**
 * What DATABASE_URL selects, checked as one unit: the storage kind, the SQLite path (folder created,
 * key file beside it) or the PostgreSQL settings every node must share (REDIS_URL, SECRET_KEY:
 * a key file per node would let each seal channel keys the others cannot open).
 */
function storage(env: Record<string, string | undefined>) {
  const databaseUrl = env.DATABASE_URL?.trim() || DEFAULT_DATABASE_URL;
  const workers = int(env, 'WORKERS', 1, 1, 256);
  const redis = redisSettings(env);
  const pgSchema = pgSchemaName(env);
  const changeFeedResyncMs = int(env, 'CHANGE_FEED_RESYNC_MS', 30_000, 1_000, 3_600_000);
  const pgSilenceMs = int(env, 'PG_SILENCE_MS', 30_000, 0, 3_600_000);
  const redisSilenceMs = int(env, 'REDIS_SILENCE_MS', 5_000, 0, 600_000);
  if (POSTGRES_URL.test(databaseUrl)) {
    checkPostgresUrl(databaseUrl);
    const missing = [redis.redisUrl ? null : 'REDIS_URL', env.SECRET_KEY?.trim() ? null : 'SECRET_KEY'].filter(Boolean);
    if (missing.length) throw new ConfigError(`DATABASE_URL is PostgreSQL, which also needs REDIS_URL and SECRET_KEY (shared by every node); missing: ${missing.join(', ')}`);
    return { databaseUrl, dbKind: 'postgres' as const, sqlitePath: '', pgSchema, ...redis, workers, changeFeedResyncMs, pgSilenceMs, redisSilenceMs };
  }
  const sqlitePath = parseSqliteUrl(databaseUrl);
  if (workers > 1) throw new ConfigError(`WORKERS=${workers} needs PostgreSQL (DATABASE_URL=postgres://…, with REDIS_URL and SECRET_KEY): a SQLite database is served by one process`);
  if (sqlitePath !== ':memory:') prepareDataFolder(sqlitePath);
  return { databaseUrl, dbKind: 'sqlite' as const, sqlitePath, pgSchema, ...redis, workers, changeFeedResyncMs, pgSilenceMs, redisSilenceMs };
}

/** Builds the validated configuration; throws ConfigError with a one-line reason. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const store = storage(env);
  const rootUsername = env.ROOT_USERNAME?.trim() || 'root';
  if (!/^[A-Za-z0-9_.-]{3,64}$/.test(rootUsername)) throw new ConfigError('ROOT_USERNAME must be 3-64 characters of letters, digits, _ . -');
  const rootPassword = env.ROOT_PASSWORD || undefined;
  const tls = tlsFiles(env);
  if (rootPassword !== undefined && rootPassword.length < 8) throw new ConfigError('ROOT_PASSWORD must be at least 8 characters');
  return {
    port: int(env, 'PORT', 3000, 0, 65535),
    host: env.HOST?.trim() || '0.0.0.0',
    ...store,
    rootUsername,
    rootPassword,
    // In postgres mode never a key file: every node must seal and open with the same key.
    secretKey: store.dbKind === 'postgres' ? parseSecretKey(env.SECRET_KEY!.trim()) : secretKey(env, store.sqlitePath),
    maxBodyBytes: int(env, 'MAX_BODY_BYTES', 32 * 1024 * 1024, 1024, 1024 * 1024 * 1024),
    anonMaxBodyBytes: int(env, 'ANON_MAX_BODY_BYTES', 64 * 1024, 1024, 1024 * 1024 * 1024),
    jsonMaxDepth: int(env, 'JSON_MAX_DEPTH', 64, 8, 10_000),
    bodyTimeoutMs: int(env, 'BODY_TIMEOUT_MS', 30_000, 100, 3_600_000),
    maxKeysPerUser: int(env, 'MAX_KEYS_PER_USER', 100, 0, 1_000_000),
    sessionTtlSeconds: int(env, 'SESSION_TTL_HOURS', 168, 1, 24 * 365) * 3600,
    // Served over HTTPS, the session cookie is Secure unless told otherwise: by the gateway itself, or by a proxy
    // in front, which PUBLIC_URL's https scheme declares. Without Secure a browser also sends the cookie over
    // plain HTTP to the same host, where anyone on the path can read it.
    cookieSecure: bool(env, 'COOKIE_SECURE', tls !== null || /^https:\/\//i.test(env.PUBLIC_URL?.trim() ?? '')),
    loginMaxFailures: int(env, 'LOGIN_MAX_FAILURES', 5, 1, 1000),
    loginLockSeconds: int(env, 'LOGIN_LOCK_SECONDS', 60, 1, 86400),
    loginIpPerMinute: int(env, 'LOGIN_IP_PER_MINUTE', 30, 1, 100000),
    passwordHashSlots: int(env, 'PASSWORD_HASH_SLOTS', Math.max(1, Math.floor(availableParallelism() / 2)), 1, 1024),
    passwordHashQueue: int(env, 'PASSWORD_HASH_QUEUE', 16, 0, 100000),
    historyReadsQueue: int(env, 'HISTORY_READS_QUEUE', 64, 0, 100_000),
    historyQueryTimeoutMs: int(env, 'HISTORY_QUERY_TIMEOUT_MS', 10_000, 1, 3_600_000),
    passwordChecksPerMinute: int(env, 'PASSWORD_CHECKS_PER_MINUTE', 30, 1, 100000),
    attemptChecksQueue: int(env, 'ATTEMPT_CHECKS_QUEUE', 1024, 0, 100000),
    reusePort: bool(env, 'LISTEN_REUSE_PORT', false),
    idleTimeoutSeconds: int(env, 'IDLE_TIMEOUT_SECONDS', 255, 10, 255),
    trustProxy: bool(env, 'TRUST_PROXY', false),
    trustProxyHops: trustProxyHops(env),
    logRequests: bool(env, 'LOG_REQUESTS', false),
    loopDelaySampleMs: int(env, 'LOOP_DELAY_SAMPLE_MS', 0, 0, 60_000),
    tls,
    logLevel: oneOf(env, 'LOG_LEVEL', LOG_LEVELS, 'info'),
    logFormat: oneOf(env, 'LOG_FORMAT', LOG_FORMATS, 'text'),
    env,
  };
}

export { int as readIntEnv, bool as readBoolEnv, parseSqliteUrl, parseSecretKey };
