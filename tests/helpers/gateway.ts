/**
 * Starts a real gateway (real services, real SQLite file in a temp folder) on a random port.
 * Every end-to-end test goes through HTTP against this, never through internals.
 *
 * GW_TEST_BACKEND=pg (`bun run test:pg`): the same gateway on PostgreSQL (GW_TEST_PG, a fresh schema
 * emptied at stop and reused by the next gateway, see pg-schemas.ts) and Redis (GW_TEST_REDIS, a fresh key prefix deleted at stop).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '@gw/config';
import { memoryLogger } from '@gw/core';
import { createServices, type Services } from '../../apps/server/src/services';
import { listen } from '../../apps/server/src/app';
import { PG_TEST_URL } from './postgres';
import { returnSchema, takeSchema } from './pg-schemas';
import { REDIS_TEST_URL, freshPrefix, redisClient, settleAdmissionEpoch } from './redis';
import { testDb, type TestDb } from './test-db';

/** The backend every in-process test gateway runs on (GW_TEST_BACKEND=pg: PostgreSQL + Redis). */
export const TEST_BACKEND: 'sqlite' | 'pg' = process.env.GW_TEST_BACKEND === 'pg' ? 'pg' : 'sqlite';
/** For `test.skipIf(ON_PG)` on tests of SQLite-only internals (journal, WAL, lock file); say why beside it. */
export const ON_PG = TEST_BACKEND === 'pg';

export const ROOT_PASSWORD = 'root-password-123';

export interface TestGateway {
  url: string;
  services: Services;
  dir: string;
  /** Everything the gateway logged (text format, every level): kept here so the test output stays clean. */
  logs: string[];
  /** A management access token of the root user. */
  rootToken: string;
  /** Raw SQL on the gateway's database, whichever backend (`?` placeholders; settlements written first). */
  db: TestDb;
  /** JSON request helper; `token` defaults to the root token, `null` sends no credentials. */
  api(method: string, path: string, body?: unknown, token?: string | null, headers?: Record<string, string>): Promise<{ status: number; body: any; headers: Headers }>;
  stop(): Promise<void>;
}

export async function startGateway(env: Record<string, string> = {}): Promise<TestGateway> {
  const dir = mkdtempSync(join(tmpdir(), 'gw-test-'));
  const pg = ON_PG && !env.DATABASE_URL ? { schema: await takeSchema(), prefix: freshPrefix('e2e') } : null;
  const config = loadConfig({
    DATABASE_URL: `sqlite:${join(dir, 'gateway.db')}`,
    ...(pg ? { DATABASE_URL: PG_TEST_URL, PG_SCHEMA: pg.schema, REDIS_URL: REDIS_TEST_URL, REDIS_PREFIX: pg.prefix, SECRET_KEY: Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('hex') } : {}),
    ROOT_PASSWORD,
    HOST: '127.0.0.1',
    LOGIN_IP_PER_MINUTE: '1000',
    ...env,
  });
  // A fresh prefix has no admission epoch, which a node must read as "Redis may have lost its data" and
  // wait out (503) for the recovery window; no holds can exist under a new prefix, so it starts settled.
  if (pg) await settleAdmissionEpoch(config.redisPrefix);
  const { log, lines: logs } = memoryLogger({ format: config.logFormat });
  let services: Services;
  try {
    services = await createServices(config, log);
  } catch (err) {
    if (pg) await returnSchema(pg.schema);
    throw err;
  }
  const app = listen(services, 0, '127.0.0.1');
  // With TLS_CERT_FILE set the gateway serves HTTPS; the helper trusts that certificate as its CA.
  const url = `${config.tls ? 'https' : 'http'}://127.0.0.1:${app.server!.port}`;
  const tls = config.tls ? { ca: config.tls.cert } : undefined;
  const root = (await services.users.byUsername(config.rootUsername))!;
  const rootToken = (await services.auth.createAccessToken(root.id, 'test')).token;
  const api: TestGateway['api'] = async (method, path, body, token = rootToken, headers = {}) => {
    const h: Record<string, string> = { ...headers };
    if (token) h.authorization = `Bearer ${token}`;
    if (body !== undefined) h['content-type'] ??= 'application/json';
    const res = await fetch(url + path, { method, headers: h, tls, body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body) });
    const text = await res.text();
    let parsed: any = text;
    try { parsed = JSON.parse(text); } catch { /* keep text */ }
    return { status: res.status, body: parsed, headers: res.headers };
  };
  return {
    url, services, dir, logs, rootToken, api, db: testDb(services),
    async stop() {
      await app.stop(true);
      await services.close();
      rmSync(dir, { recursive: true, force: true });
      if (pg) {
        await returnSchema(pg.schema);
        const redis = redisClient();
        const keys = await redis.keys(`${pg.prefix}*`);
        if (keys.length) await redis.del(...keys);
        redis.disconnect();
      }
    },
  };
}

/** Creates a user through the API and returns an access token for it. */
export async function makeUser(gw: TestGateway, role: 1 | 10 | 100 = 1, extra: Record<string, unknown> = {}): Promise<{ id: number; username: string; password: string; token: string }> {
  const username = `u${crypto.randomUUID().slice(0, 8)}`;
  const password = 'user-password-123';
  // Inserted directly (not via the API) so identity tests do not depend on the users feature.
  const { hashPassword } = await import('@gw/identity');
  const now = Math.floor(Date.now() / 1000);
  const row = await gw.services.users.insert({ username, passwordHash: await hashPassword(password), role, status: 1, createdAt: now, updatedAt: now, ...extra });
  const token = (await gw.services.auth.createAccessToken(row.id, 'test')).token;
  return { id: row.id, username, password, token };
}
