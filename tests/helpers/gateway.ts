/**
 * Starts a real gateway (real services, real SQLite file in a temp folder) on a random port.
 * Every end-to-end test goes through HTTP against this, never through internals.
 *
 * GW_TEST_BACKEND=pg (`bun run test:pg`): the same gateway on PostgreSQL (GW_TEST_PG, a fresh schema
 * emptied at stop and reused by the next gateway, see pg-schemas.ts) and Redis (GW_TEST_REDIS, a fresh key prefix deleted at stop).
 *
 * GW_TEST_CLUSTER=N with the PostgreSQL backend (`bun run test:cluster-e2e`): the in-process gateway is
 * node 1 of N; N-1 gateway processes with the same configuration join it on its schema and prefix, and
 * `url` is a TCP proxy that hands each new connection to the next node in turn. The test's own fetches
 * to `url` go without keep-alive, so consecutive requests land on different nodes. `logs` has every
 * node's lines (the others' read from their stdout and stderr); `services` and `db` stay node 1's.
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
import { spawnNode, type ClusterNode } from './cluster';
import { tcpProxy, type TcpProxy } from './tcp-proxy';

/** The backend every in-process test gateway runs on (GW_TEST_BACKEND=pg: PostgreSQL + Redis). */
export const TEST_BACKEND: 'sqlite' | 'pg' = process.env.GW_TEST_BACKEND === 'pg' ? 'pg' : 'sqlite';
/** For `test.skipIf(ON_PG)` on tests of SQLite-only internals (journal, WAL, lock file); say why beside it. */
export const ON_PG = TEST_BACKEND === 'pg';

export const ROOT_PASSWORD = 'root-password-123';

/** Nodes per test gateway (GW_TEST_CLUSTER, PostgreSQL backend only). */
export const CLUSTER_NODES = ON_PG ? Math.max(1, Number(process.env.GW_TEST_CLUSTER ?? 1) || 1) : 1;

/** How long a test waits after a management write in cluster mode, for the change feed to reach every node. */
const CLUSTER_SETTLE_MS = 100;

/** Origins of the cluster proxies in use: fetches to them open a new connection each, so requests spread over the nodes. */
const proxied = new Set<string>();
if (CLUSTER_NODES > 1) {
  const original = globalThis.fetch;
  const patched = ((input: any, init?: any) => {
    const href = typeof input === 'string' ? input : input instanceof URL ? input.href : input?.url;
    for (const origin of proxied) if (typeof href === 'string' && href.startsWith(origin)) return original(input, { ...init, keepalive: false });
    return original(input, init);
  }) as typeof fetch;
  globalThis.fetch = Object.assign(patched, original);
}

/** Starts the other nodes of a cluster on the same settings and a round-robin proxy over all of them. */
async function joinCluster(env: Record<string, string>, first: { host: string; port: number }, logs: string[]): Promise<{ proxy: TcpProxy; nodes: ClusterNode[] }> {
  // Their log lines join node 1's (`logs`), so a test finds a request's line whichever node served it.
  const nodes = await Promise.all(Array.from({ length: CLUSTER_NODES - 1 }, (_, i) => spawnNode(i + 1, { ...env, PORT: '0', HOST: '127.0.0.1' }, (line) => logs.push(line))));
  const targets = [first, ...nodes.map((n) => ({ host: '127.0.0.1', port: Number(new URL(n.url).port) }))];
  let next = 0;
  const proxy = tcpProxy(() => targets[next++ % targets.length]!);
  return { proxy, nodes };
}

export interface TestGateway {
  url: string;
  /**
   * Node 1 itself, past the cluster proxy (`url` when there is no cluster): for tests of what is per node by
   * design (health counts, affinity, upstream connection caps, the count_tokens cache, key rotation, a node's
   * metrics and log lines, a fault injected into node 1's services).
   */
  nodeUrl: string;
  services: Services;
  dir: string;
  /** Everything the gateway logged (text format, every level): kept here so the test output stays clean. */
  logs: string[];
  /** A management access token of the root user. */
  rootToken: string;
  /** Raw SQL on the gateway's database, whichever backend (`?` placeholders; settlements written first). */
  db: TestDb;
  /** `api` sent to node 1 itself (`nodeUrl`). */
  nodeApi: TestGateway['api'];
  /** JSON request helper; `token` defaults to the root token, `null` sends no credentials. */
  api(method: string, path: string, body?: unknown, token?: string | null, headers?: Record<string, string>): Promise<{ status: number; body: any; headers: Headers }>;
  stop(): Promise<void>;
}

export async function startGateway(env: Record<string, string> = {}): Promise<TestGateway> {
  const dir = mkdtempSync(join(tmpdir(), 'gw-test-'));
  const pg = ON_PG && !env.DATABASE_URL ? { schema: await takeSchema(), prefix: freshPrefix('e2e') } : null;
  const settings: Record<string, string> = {
    DATABASE_URL: `sqlite:${join(dir, 'gateway.db')}`,
    ...(pg ? { DATABASE_URL: PG_TEST_URL, PG_SCHEMA: pg.schema, REDIS_URL: REDIS_TEST_URL, REDIS_PREFIX: pg.prefix, SECRET_KEY: Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('hex') } : {}),
    ROOT_PASSWORD,
    HOST: '127.0.0.1',
    LOGIN_IP_PER_MINUTE: '1000',
    // Many tests log in and change passwords in bursts; the tests of these limits set them small.
    PASSWORD_HASH_QUEUE: '10000', PASSWORD_CHECKS_PER_MINUTE: '10000',
    ...env,
  };
  const config = loadConfig(settings);
  // A gateway started again on a schema that has run before (a restart test) gets a fresh prefix, so no admission
  // epoch: a node reads that as "Redis lost its data" and waits out the recovery window (503). No holds can exist
  // under a new prefix, so it starts settled. (A new schema's first start needs none of this: migration 0013.)
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
  let cluster: Awaited<ReturnType<typeof joinCluster>> | null = null;
  if (pg && CLUSTER_NODES > 1) {
    try {
      cluster = await joinCluster(settings, { host: '127.0.0.1', port: app.server!.port! }, logs);
    } catch (err) {
      await app.stop(true);
      await services.close();
      await returnSchema(pg.schema);
      throw err;
    }
  }
  // With TLS_CERT_FILE set the gateway serves HTTPS; the helper trusts that certificate as its CA.
  const url = `${config.tls ? 'https' : 'http'}://127.0.0.1:${cluster ? cluster.proxy.port : app.server!.port}`;
  if (cluster) proxied.add(url);
  const tls = config.tls ? { ca: config.tls.cert } : undefined;
  const root = (await services.users.byUsername(config.rootUsername))!;
  const rootToken = (await services.auth.createAccessToken(root.id, 'test')).token;
  const nodeUrl = `${config.tls ? 'https' : 'http'}://127.0.0.1:${app.server!.port}`;
  const apiAt = (base: string): TestGateway['api'] => async (method, path, body, token = rootToken, headers = {}) => {
    const h: Record<string, string> = { ...headers };
    if (token) h.authorization = `Bearer ${token}`;
    if (body !== undefined) h['content-type'] ??= 'application/json';
    const res = await fetch(base + path, { method, headers: h, tls, body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body) });
    const text = await res.text();
    let parsed: any = text;
    try { parsed = JSON.parse(text); } catch { /* keep text */ }
    // Behind the round-robin proxy the next request may reach a node that has not heard of this write yet
    // (the change feed takes milliseconds, by design): a test that writes then uses waits for it, as a
    // client of a real cluster would have to (README: Running a cluster).
    if (cluster && method !== 'GET' && res.status < 400) await Bun.sleep(CLUSTER_SETTLE_MS);
    return { status: res.status, body: parsed, headers: res.headers };
  };
  return {
    url, nodeUrl, services, dir, logs, rootToken, api: apiAt(url), nodeApi: apiAt(nodeUrl), db: testDb(services),
    async stop() {
      if (cluster) {
        proxied.delete(url);
        cluster.proxy.stop();
        await Promise.all(cluster.nodes.map((n) => n.kill9()));
      }
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

/**
 * Creates a user the way the management API does (UserService: the opening balance a ledger entry, the change
 * announced on the bus, so every cache and node holds the user as production's would) and returns an access token
 * for it. `extra`: username, email, group, quota (credited through the ledger), status (2 = disabled afterwards).
 */
export async function makeUser(gw: TestGateway, role: 1 | 10 | 100 = 1, extra: MakeUserExtra = {}): Promise<{ id: number; username: string; password: string; token: string }> {
  const { status, quota, ...rest } = extra;
  const unknown = Object.keys(rest).filter((k) => !['username', 'email', 'group'].includes(k));
  if (unknown.length) throw new Error(`makeUser: unsupported fields ${unknown.join(', ')}`);
  const username = extra.username ?? `u${crypto.randomUUID().slice(0, 8)}`;
  const password = 'user-password-123';
  const root = { id: 1, role: 100 };
  const user = await gw.services.userAdmin.create(root, { ...rest, username, password, role, ...(quota ? { quota } : {}) });
  if (status !== undefined && status !== 1) await gw.services.userAdmin.update(root, { id: user.id, status });
  const token = (await gw.services.auth.createAccessToken(user.id, 'test')).token;
  return { id: user.id, username, password, token };
}

export interface MakeUserExtra { username?: string; email?: string | null; group?: string; quota?: number; status?: 1 | 2 }
