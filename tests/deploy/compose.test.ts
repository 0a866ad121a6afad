/**
 * The operator's cluster example (docker-compose.yml, deploy/haproxy.cfg, Dockerfile) checked without
 * Docker: every variable a gateway node is given is one the server reads and documents, the resolved
 * environment passes the real configuration loader in PostgreSQL mode, the nodes agree on what they
 * must share, the database and Redis addresses name services of the file, and the proxy sends traffic
 * round-robin to every node. deploy/haproxy-live.test.ts runs the same proxy config for real.
 */
import { describe, expect, test } from 'bun:test';
import { Glob } from 'bun';
import { join } from 'node:path';
import { loadConfig } from '@gw/config';

const ROOT = join(import.meta.dir, '..', '..');
const compose = Bun.YAML.parse(await Bun.file(join(ROOT, 'docker-compose.yml')).text()) as any;
const services: Record<string, any> = compose.services;

/** Services built from this repository: the gateway nodes. */
const nodes = Object.entries(services).filter(([, s]) => s.build === '.' || s.build?.context === '.');

/** Compose's `environment`, as a map (it may be written as a list of NAME=value). */
export function envOf(service: any): Record<string, string> {
  const e = service.environment ?? {};
  if (Array.isArray(e)) return Object.fromEntries(e.map((kv: string) => [kv.split('=')[0]!, kv.slice(kv.indexOf('=') + 1)]));
  return Object.fromEntries(Object.entries(e).map(([k, v]) => [k, v === null ? '' : String(v)]));
}

/** Compose interpolation: ${X}, ${X:-default}, ${X-default}, ${X:?error}, ${X?error}, $$. */
export function interpolate(value: string, vars: Record<string, string | undefined>): string {
  return value.replace(/\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?)([-?])((?:[^}])*))?\}/g, (all, name, colon, op, arg) => {
    if (all === '$$') return '$';
    const v = vars[name];
    const missing = v === undefined || (colon === ':' && v === '');
    if (!op) return v ?? '';
    if (op === '-') return missing ? arg : v!;
    if (missing) throw new Error(`compose would refuse to start: ${name}: ${arg}`);
    return v!;
  });
}

/** Names the server reads from its environment: env.NAME, env['NAME'], helper(env, 'NAME'). */
async function namesReadByServer(): Promise<Set<string>> {
  const read = new Set<string>();
  for (const dir of ['apps', 'libs']) {
    for await (const f of new Glob('**/*.ts').scan({ cwd: join(ROOT, dir) })) {
      if (/\.(test|contract|check)\.ts$/.test(f) || f.includes('node_modules')) continue;
      const text = await Bun.file(join(ROOT, dir, f)).text();
      for (const re of [/\benv\??\.([A-Z][A-Z0-9_]*)\b/g, /\benv\s*,\s*['"]([A-Z][A-Z0-9_]*)['"]/g, /\benv\??\.?\[\s*['"]([A-Z][A-Z0-9_]*)['"]\s*\]/g]) {
        for (const m of text.matchAll(re)) read.add(m[1]!);
      }
    }
  }
  return read;
}

/** Names in the first column of README's configuration table. */
async function namesDocumented(): Promise<Set<string>> {
  const readme = await Bun.file(join(ROOT, 'README.md')).text();
  const section = readme.split('\n## Configuration')[1]!.split('\n## ')[0]!;
  const names = new Set<string>();
  for (const line of section.split('\n')) if (line.startsWith('| `')) for (const m of line.split('|')[1]!.matchAll(/`([A-Z][A-Z0-9_]*)`/g)) names.add(m[1]!);
  return names;
}

const SECRET = 'ab'.repeat(32);
/** One node's environment as compose would hand it over, with only SECRET_KEY given by the operator. */
const resolved = (service: any, vars: Record<string, string | undefined> = { SECRET_KEY: SECRET }) =>
  Object.fromEntries(Object.entries(envOf(service)).map(([k, v]) => [k, interpolate(v, vars)]));

describe('docker-compose.yml', () => {
  test('runs three gateway nodes from the repository, plus PostgreSQL, Redis and a proxy', () => {
    expect(nodes.map(([name]) => name).sort()).toEqual(['gateway1', 'gateway2', 'gateway3']);
    for (const name of ['postgres', 'redis', 'proxy']) expect(services[name]).toBeDefined();
  });

  test('every variable a node gets is read by the server and documented', async () => {
    const read = await namesReadByServer();
    const documented = await namesDocumented();
    // The scan itself must work: a broken pattern would make every name "unknown" or hide this test's purpose.
    for (const known of ['DATABASE_URL', 'REDIS_URL', 'SECRET_KEY', 'WORKERS', 'PG_SETTLE_BATCH']) expect(read.has(known) && documented.has(known)).toBe(true);
    expect(read.has('DATABSE_URL')).toBe(false);
    for (const [name, service] of nodes) {
      const names = Object.keys(envOf(service));
      expect(names.length).toBeGreaterThan(5);
      expect({ node: name, unread: names.filter((n) => !read.has(n)), undocumented: names.filter((n) => !documented.has(n)) }).toEqual({ node: name, unread: [], undocumented: [] });
    }
  });

  test('a node starts only with SECRET_KEY set, and its resolved environment passes the config loader in PostgreSQL mode', () => {
    for (const [, service] of nodes) {
      expect(() => resolved(service, {})).toThrow(/SECRET_KEY/);
      const env = resolved(service);
      const config = loadConfig(env);
      expect(config.dbKind).toBe('postgres');
      expect(config.redisUrl).toBe(env.REDIS_URL!);
      expect(config.port).toBe(3000);
      expect(config.host).toBe('0.0.0.0');
      expect(config.workers).toBe(1);
      // WORKERS can be raised per deployment and is still valid (PostgreSQL mode allows it).
      expect(loadConfig(resolved(service, { SECRET_KEY: SECRET, WORKERS: '4' })).workers).toBe(4);
    }
  });

  test('the nodes share what must be shared across a cluster', () => {
    const envs = nodes.map(([, s]) => resolved(s));
    for (const name of ['DATABASE_URL', 'REDIS_URL', 'SECRET_KEY', 'PG_SCHEMA', 'REDIS_PREFIX', 'ROOT_USERNAME', 'PORT']) {
      expect(new Set(envs.map((e) => e[name])).size).toBe(1);
    }
  });

  test('DATABASE_URL and REDIS_URL point at the services of this file, with the credentials PostgreSQL is given', () => {
    const pgEnv = resolved(services.postgres, {});
    for (const [, service] of nodes) {
      const env = resolved(service);
      const db = new URL(env.DATABASE_URL!);
      expect(services[db.hostname]).toBe(services.postgres);
      expect(decodeURIComponent(db.username)).toBe(pgEnv.POSTGRES_USER!);
      expect(decodeURIComponent(db.password)).toBe(pgEnv.POSTGRES_PASSWORD!);
      expect(db.pathname.slice(1)).toBe(pgEnv.POSTGRES_DB!);
      const redis = new URL(env.REDIS_URL!);
      expect(services[redis.hostname]).toBe(services.redis);
      // A node waits for both to be healthy, so its migrations and Redis check do not fail at first start.
      expect(service.depends_on).toMatchObject({ postgres: { condition: 'service_healthy' }, redis: { condition: 'service_healthy' } });
      expect(services.postgres.healthcheck).toBeDefined();
      expect(services.redis.healthcheck).toBeDefined();
    }
  });
});

/** The directives of one haproxy section (`frontend gateway`, `backend gateways`, …), comments removed. */
export function haproxySections(text: string): Map<string, string[]> {
  const sections = new Map<string, string[]>();
  let current: string[] | null = null;
  for (const raw of text.split('\n')) {
    const line = raw.replace(/#.*/, '').trim();
    if (!line) continue;
    if (/^(global|defaults|frontend|backend|listen|resolvers)\b/.test(raw)) {
      current = [];
      sections.set(line, current);
    } else current?.push(line);
  }
  return sections;
}

describe('deploy/haproxy.cfg', () => {
  const mount = (services.proxy.volumes as string[]).find((v) => v.includes('haproxy.cfg'))!;
  const cfgPath = join(ROOT, mount.split(':')[0]!);

  test('is the file the proxy service mounts as its configuration', async () => {
    expect(mount.split(':')[1]).toBe('/usr/local/etc/haproxy/haproxy.cfg');
    expect(await Bun.file(cfgPath).exists()).toBe(true);
  });

  test('routes round-robin to every gateway node on its port, and listens on the published port', async () => {
    const s = haproxySections(await Bun.file(cfgPath).text());
    const frontend = [...s.entries()].find(([k]) => k.startsWith('frontend '))![1];
    const backendName = frontend.find((l) => l.startsWith('default_backend '))!.split(/\s+/)[1]!;
    const backend = s.get(`backend ${backendName}`)!;
    expect(backend).toContain('balance roundrobin');
    const servers = backend.filter((l) => l.startsWith('server ')).map((l) => l.split(/\s+/)[2]!);
    expect(servers.sort()).toEqual(nodes.map(([name, svc]) => `${name}:${resolved(svc).PORT}`).sort());
    // Each node is health-checked, so a stopped node leaves the rotation.
    expect(backend).toContain('option httpchk');
    expect(backend.some((l) => /^http-check send meth GET uri \/health\b/.test(l))).toBe(true);
    const bind = frontend.find((l) => l.startsWith('bind '))!.split(/\s+/)[1]!;
    const published = (services.proxy.ports as string[]).map((p) => interpolate(p, {}).split(':').pop());
    expect(published).toContain(bind.split(':').pop());
  });

  test('replaces X-Forwarded-For (the nodes trust its first address) and keeps WebSockets open for a session', async () => {
    const s = haproxySections(await Bun.file(cfgPath).text());
    const all = [...s.values()].flat();
    for (const [, svc] of nodes) expect(resolved(svc).TRUST_PROXY).toBe('true');
    expect(all).toContain('http-request set-header X-Forwarded-For %[src]');
    // `option forwardfor` appends: a client's own X-Forwarded-For would come first and be believed.
    expect(all.some((l) => l.startsWith('option forwardfor'))).toBe(false);
    const tunnel = all.find((l) => l.startsWith('timeout tunnel '))!.split(/\s+/)[2]!;
    expect(Number(tunnel.replace(/s$/, ''))).toBeGreaterThanOrEqual(3600);
    // HTTP mode: the proxy sees each request (round-robin per request, WebSocket upgrades pass through).
    expect(s.get('defaults')).toContain('mode http');
  });
});

describe('Dockerfile', () => {
  test('builds on Bun 1.4.4 and runs the server entry directly (signals reach it)', async () => {
    const text = await Bun.file(join(ROOT, 'Dockerfile')).text();
    expect(text).toMatch(/^FROM oven\/bun:1\.4\.4\b/m);
    expect(text).toContain('bun install --frozen-lockfile --production');
    expect(text).toMatch(/^CMD \["bun", "apps\/server\/src\/index\.ts"\]$/m);
    expect(await Bun.file(join(ROOT, 'apps/server/src/index.ts')).exists()).toBe(true);
  });
});
