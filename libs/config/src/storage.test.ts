import { afterEach, describe, expect, test } from 'bun:test';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig, redactUrl } from './index';
import { startGatewayProcess } from '../../../tests/helpers/gateway-process';

const KEY = 'ab'.repeat(32);
const PG = { DATABASE_URL: 'postgres://gw:s3cret@db.internal:5432/gateway', REDIS_URL: 'redis://127.0.0.1:6379', SECRET_KEY: KEY };
const ROOT = join(import.meta.dir, '..', '..', '..');

const dirs: string[] = [];
afterEach(() => { for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true }); });

/** The ConfigError message of a failing load; fails the test if it loads or throws anything else. */
function refusal(env: Record<string, string>): string {
  try {
    loadConfig(env);
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    const msg = (e as Error).message;
    expect(msg).not.toContain('\n');
    return msg;
  }
  throw new Error(`loaded without error: ${JSON.stringify(env)}`);
}

describe('storage settings', () => {
  test('SQLite stays the default: one worker, no Redis, public schema, gw: prefix, 30 s resync', () => {
    const c = loadConfig({ DATABASE_URL: 'sqlite::memory:' });
    expect(c).toMatchObject({ dbKind: 'sqlite', sqlitePath: ':memory:', workers: 1, redisUrl: null, redisPrefix: 'gw:', pgSchema: 'public', changeFeedResyncMs: 30_000 });
  });

  test.each(['postgres://gw@db:5432/gateway', 'postgresql://gw:pw@db/gateway', 'postgres:///gateway?host=/var/run/postgresql&user=gw'])(
    '%s selects postgres mode with REDIS_URL and SECRET_KEY, and writes no key file', (url) => {
      const d = mkdtempSync(join(tmpdir(), 'cfg-pg-'));
      dirs.push(d);
      const c = loadConfig({ ...PG, DATABASE_URL: url, PG_SCHEMA: 'gw_a', REDIS_PREFIX: 'gwtest:1:', WORKERS: '4', CHANGE_FEED_RESYNC_MS: '5000' });
      expect(c).toMatchObject({ dbKind: 'postgres', databaseUrl: url, sqlitePath: '', pgSchema: 'gw_a', redisUrl: PG.REDIS_URL, redisPrefix: 'gwtest:1:', workers: 4, changeFeedResyncMs: 5000 });
      expect(Buffer.from(c.secretKey).toString('hex')).toBe(KEY);
      expect(readdirSync(d)).toEqual([]);
      expect(existsSync(join(process.cwd(), 'secret.key'))).toBe(false);
    });

  test.each([
    [{ REDIS_URL: '' }, 'missing: REDIS_URL'],
    [{ SECRET_KEY: '' }, 'missing: SECRET_KEY'],
    [{ REDIS_URL: '', SECRET_KEY: '  ' }, 'missing: REDIS_URL, SECRET_KEY'],
  ])('postgres mode without %j stops with one line naming what is missing', (env, missing) => {
    const msg = refusal({ ...PG, ...env });
    expect(msg).toContain('DATABASE_URL is PostgreSQL, which also needs REDIS_URL and SECRET_KEY');
    expect(msg.endsWith(missing)).toBe(true);
  });

  test('WORKERS > 1 needs PostgreSQL; WORKERS is an integer from 1 to 256', () => {
    expect(refusal({ DATABASE_URL: 'sqlite::memory:', WORKERS: '2' })).toBe('WORKERS=2 needs PostgreSQL (DATABASE_URL=postgres://…, with REDIS_URL and SECRET_KEY): a SQLite database is served by one process');
    expect(loadConfig({ DATABASE_URL: 'sqlite::memory:', WORKERS: '1' }).workers).toBe(1);
    expect(refusal({ ...PG, WORKERS: '0' })).toContain('WORKERS must be between 1 and 256');
    expect(refusal({ ...PG, WORKERS: 'many' })).toContain('WORKERS must be an integer');
  });

  test('a SQLite path is refused before its folder or key file is created when WORKERS is wrong', () => {
    const d = mkdtempSync(join(tmpdir(), 'cfg-w-'));
    dirs.push(d);
    refusal({ DATABASE_URL: `sqlite:${join(d, 'sub', 'g.db')}`, WORKERS: '3' });
    expect(readdirSync(d)).toEqual([]);
  });

  test.each([
    [{ DATABASE_URL: 'postgres://' }, 'DATABASE_URL names no PostgreSQL host'],
    [{ DATABASE_URL: 'postgres://gw:pw@host:notaport/db' }, 'DATABASE_URL is not a valid PostgreSQL URL: "postgres://gw:***@host:notaport/db"'],
    [{ DATABASE_URL: 'mysql://gw:topsecret@db/x' }, 'DATABASE_URL must look like sqlite:./data/gateway.db, sqlite::memory: or postgres://user@host:5432/db, got "mysql://gw:***@db/x"'],
    [{ REDIS_URL: 'http://127.0.0.1:6379' }, 'REDIS_URL must look like redis://host:6379 or rediss://host:6380'],
    [{ REDIS_PREFIX: '{gw}:' }, 'REDIS_PREFIX must be up to 64 letters'],
    [{ PG_SCHEMA: 'Gw-Test' }, 'PG_SCHEMA must be 1-63 lowercase letters'],
    [{ PG_SCHEMA: 'x; drop schema public' }, 'PG_SCHEMA must be'],
    [{ CHANGE_FEED_RESYNC_MS: '10' }, 'CHANGE_FEED_RESYNC_MS must be between 1000 and 3600000'],
    [{ SECRET_KEY: 'short' }, 'SECRET_KEY must be 32 bytes'],
  ])('bad %j stops with a one-line reason that never shows a password', (env, reason) => {
    const msg = refusal({ ...PG, ...env });
    expect(msg).toContain(reason);
    expect(msg).not.toContain('s3cret');
    expect(msg).not.toContain('topsecret');
  });

  test('redactUrl hides passwords in the user part and in a password= parameter only', () => {
    expect(redactUrl('postgres://gw:s3cret@db:5432/x')).toBe('postgres://gw:***@db:5432/x');
    expect(redactUrl('rediss://:tok@cache:6380')).toBe('rediss://:***@cache:6380');
    expect(redactUrl('postgres://gw@db/x?sslmode=require&password=p&x=1')).toBe('postgres://gw@db/x?sslmode=require&password=***&x=1');
    expect(redactUrl('postgres://gw@db/x')).toBe('postgres://gw@db/x');
    expect(redactUrl('sqlite:./data/gateway.db')).toBe('sqlite:./data/gateway.db');
  });
});

describe('the server process', () => {
  const run = async (env: Record<string, string>) => {
    const p = Bun.spawn([process.execPath, 'run', 'apps/server/src/index.ts'], { cwd: ROOT, env: { ...process.env, PORT: '0', ...env }, stdout: 'pipe', stderr: 'pipe' });
    return { code: await p.exited, err: (await new Response(p.stderr).text()).trim() };
  };

  test('postgres mode with an unreachable database stops start-up with one line, password hidden (never half-started)', async () => {
    const { code, err } = await run({ ...PG, DATABASE_URL: 'postgres://gw:s3cret@127.0.0.1:1/gateway' });
    expect(code).toBe(1);
    expect(err).toStartWith('Start-up failed: ');
    expect(err.split('\n')).toHaveLength(1);
    expect(err).not.toContain('s3cret');
  });

  test('postgres mode without REDIS_URL names it on one line', async () => {
    const { code, err } = await run({ ...PG, REDIS_URL: '' });
    expect(code).toBe(1);
    expect(err).toBe('Configuration error: DATABASE_URL is PostgreSQL, which also needs REDIS_URL and SECRET_KEY (shared by every node); missing: REDIS_URL');
  });

  test('WORKERS=2 on SQLite is refused on one line', async () => {
    const { code, err } = await run({ DATABASE_URL: 'sqlite::memory:', WORKERS: '2' });
    expect(code).toBe(1);
    expect(err).toStartWith('Configuration error: WORKERS=2 needs PostgreSQL');
  });

  test('SQLite still starts as before and stops cleanly on SIGTERM', async () => {
    const g = await startGatewayProcess({ DATABASE_URL: 'sqlite::memory:', PORT: '0', HOST: '127.0.0.1', ROOT_PASSWORD: 'root-password-123' });
    try {
      expect((await fetch(`${g.url}/healthz`)).status).toBeLessThan(500);
    } finally {
      g.proc.kill('SIGTERM');
      expect(await g.proc.exited).toBe(0);
    }
  });
});
