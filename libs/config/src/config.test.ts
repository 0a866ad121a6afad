import { afterEach, describe, expect, test } from 'bun:test';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig } from './index';

const dirs: string[] = [];
const tmp = () => { const d = mkdtempSync(join(tmpdir(), 'cfg-')); dirs.push(d); return d; };
afterEach(() => { for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true }); });

test('defaults: port 3000, SQLite file under ./data, root user, 32 MiB body limit', () => {
  const c = loadConfig({ DATABASE_URL: 'sqlite::memory:' });
  expect(c.port).toBe(3000);
  expect(c.rootUsername).toBe('root');
  expect(c.rootPassword).toBeUndefined();
  expect(c.maxBodyBytes).toBe(32 * 1024 * 1024);
  expect(c.sqlitePath).toBe(':memory:');
});

test('front-door defaults: 64 KiB public bodies, JSON depth 64, 30 s body deadline, 100 keys per user', () => {
  const c = loadConfig({ DATABASE_URL: 'sqlite::memory:' });
  expect([c.anonMaxBodyBytes, c.jsonMaxDepth, c.bodyTimeoutMs, c.maxKeysPerUser]).toEqual([65536, 64, 30_000, 100]);
  const d = loadConfig({ DATABASE_URL: 'sqlite::memory:', ANON_MAX_BODY_BYTES: '4096', JSON_MAX_DEPTH: '16', BODY_TIMEOUT_MS: '500', MAX_KEYS_PER_USER: '0' });
  expect([d.anonMaxBodyBytes, d.jsonMaxDepth, d.bodyTimeoutMs, d.maxKeysPerUser]).toEqual([4096, 16, 500, 0]);
});

test('the database folder is created, and a secret key file beside it is created once (0600) and reused', () => {
  const d = join(tmp(), 'nested', 'deeper');
  const a = loadConfig({ DATABASE_URL: `sqlite:${join(d, 'g.db')}` });
  expect(existsSync(d)).toBe(true);
  const keyFile = join(d, 'secret.key');
  expect(statSync(keyFile).mode & 0o777).toBe(0o600);
  const b = loadConfig({ DATABASE_URL: `sqlite:${join(d, 'g.db')}` });
  expect(Buffer.from(b.secretKey).toString('hex')).toBe(readFileSync(keyFile, 'utf8').trim());
  expect(Buffer.from(a.secretKey)).toEqual(Buffer.from(b.secretKey));
});

test.each([
  [{ PORT: 'eighty' }, 'PORT must be an integer'],
  [{ PORT: '70000' }, 'PORT must be between 0 and 65535'],
  [{ DATABASE_URL: 'mysql://x' }, 'DATABASE_URL must look like sqlite:'],
  [{ ROOT_PASSWORD: 'short' }, 'ROOT_PASSWORD must be at least 8 characters'],
  [{ ROOT_USERNAME: 'a b' }, 'ROOT_USERNAME must be'],
  [{ SECRET_KEY: 'abcd' }, 'SECRET_KEY must be 32 bytes'],
  [{ COOKIE_SECURE: 'maybe' }, 'COOKIE_SECURE must be true or false'],
  [{ MAX_BODY_BYTES: '10' }, 'MAX_BODY_BYTES must be between'],
  [{ JSON_MAX_DEPTH: '100000' }, 'JSON_MAX_DEPTH must be between'],
  [{ BODY_TIMEOUT_MS: 'soon' }, 'BODY_TIMEOUT_MS must be an integer'],
  [{ ANON_MAX_BODY_BYTES: '1' }, 'ANON_MAX_BODY_BYTES must be between'],
  [{ MAX_KEYS_PER_USER: '-1' }, 'MAX_KEYS_PER_USER must be between'],
])('bad value %j stops with a one-line reason', (env, reason) => {
  const load = () => loadConfig({ DATABASE_URL: 'sqlite::memory:', ...env });
  expect(load).toThrow(ConfigError);
  try { load(); } catch (e) {
    expect((e as Error).message).toContain(reason);
    expect((e as Error).message).not.toContain('\n');
  }
});

test('the process exits 1 with "Configuration error: …" on stderr for a bad value', async () => {
  const p = Bun.spawn([process.execPath, 'run', 'apps/server/src/index.ts'], {
    cwd: join(import.meta.dir, '..', '..', '..'), env: { ...process.env, PORT: 'eighty', DATABASE_URL: 'sqlite::memory:' }, stdout: 'pipe', stderr: 'pipe',
  });
  expect(await p.exited).toBe(1);
  const err = (await new Response(p.stderr).text()).trim();
  expect(err).toBe('Configuration error: PORT must be an integer, got "eighty"');
});

test('TLS_CERT_FILE / TLS_KEY_FILE: both or neither, readable PEM files, read once; Secure cookies by default with TLS', () => {
  const d = tmp();
  const cert = join(d, 'c.pem');
  const key = join(d, 'k.pem');
  writeFileSync(cert, '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
  writeFileSync(key, '-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n');
  const base = { DATABASE_URL: 'sqlite::memory:' };
  expect(loadConfig(base).tls).toBeNull();
  expect(loadConfig(base).cookieSecure).toBe(false);
  // Behind a TLS-terminating proxy: PUBLIC_URL's scheme says the browser talks HTTPS.
  expect(loadConfig({ ...base, PUBLIC_URL: 'https://gw.example.com' }).cookieSecure).toBe(true);
  expect(loadConfig({ ...base, PUBLIC_URL: ' HTTPS://gw.example.com/' }).cookieSecure).toBe(true);
  expect(loadConfig({ ...base, PUBLIC_URL: 'http://gw.example.com' }).cookieSecure).toBe(false);
  expect(loadConfig({ ...base, PUBLIC_URL: 'https://gw.example.com', COOKIE_SECURE: 'false' }).cookieSecure).toBe(false);
  const c = loadConfig({ ...base, TLS_CERT_FILE: cert, TLS_KEY_FILE: key });
  expect(c.tls!.cert).toContain('BEGIN CERTIFICATE');
  expect(c.cookieSecure).toBe(true);
  expect(loadConfig({ ...base, TLS_CERT_FILE: cert, TLS_KEY_FILE: key, COOKIE_SECURE: 'false' }).cookieSecure).toBe(false);
  expect(() => loadConfig({ ...base, TLS_CERT_FILE: cert })).toThrow(/set together/);
  expect(() => loadConfig({ ...base, TLS_CERT_FILE: join(d, 'missing.pem'), TLS_KEY_FILE: key })).toThrow(ConfigError);
  expect(() => loadConfig({ ...base, TLS_CERT_FILE: key, TLS_KEY_FILE: key })).toThrow(/not a PEM/);
});

describe('LOG_LEVEL and LOG_FORMAT', () => {
  test('default info/text; other values are refused with the allowed list', () => {
    const c = loadConfig({ DATABASE_URL: 'sqlite::memory:' });
    expect([c.logLevel, c.logFormat]).toEqual(['info', 'text']);
    expect(loadConfig({ DATABASE_URL: 'sqlite::memory:', LOG_LEVEL: 'DEBUG', LOG_FORMAT: 'json' })).toMatchObject({ logLevel: 'debug', logFormat: 'json' });
    expect(() => loadConfig({ DATABASE_URL: 'sqlite::memory:', LOG_LEVEL: 'verbose' })).toThrow('LOG_LEVEL must be one of debug, info, warn, error, got "verbose"');
    expect(() => loadConfig({ DATABASE_URL: 'sqlite::memory:', LOG_FORMAT: 'xml' })).toThrow('LOG_FORMAT must be one of text, json');
  });
});

test('LOOP_DELAY_SAMPLE_MS: off (0) by default, a period in ms, a bad value refused', () => {
  expect(loadConfig({ DATABASE_URL: 'sqlite::memory:' }).loopDelaySampleMs).toBe(0);
  expect(loadConfig({ DATABASE_URL: 'sqlite::memory:', LOOP_DELAY_SAMPLE_MS: '10' }).loopDelaySampleMs).toBe(10);
  expect(() => loadConfig({ DATABASE_URL: 'sqlite::memory:', LOOP_DELAY_SAMPLE_MS: '-1' })).toThrow('LOOP_DELAY_SAMPLE_MS must be between 0 and 60000');
  expect(() => loadConfig({ DATABASE_URL: 'sqlite::memory:', LOOP_DELAY_SAMPLE_MS: 'fast' })).toThrow('LOOP_DELAY_SAMPLE_MS must be an integer');
});
