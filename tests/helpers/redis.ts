/**
 * Redis for tests: one server (GW_TEST_REDIS, default the local one), a fresh key prefix per test
 * file so parallel runs never see each other's keys, and the prefix's keys deleted at the end. A
 * test that must FLUSHALL starts its own private server (`privateRedis`) instead of wiping the
 * shared one.
 */
import Redis from 'ioredis';

export const REDIS_TEST_URL = process.env.GW_TEST_REDIS ?? 'redis://127.0.0.1:6379';

/** A connection that fails fast instead of queueing forever when the server is away. */
export function redisClient(url = REDIS_TEST_URL): Redis {
  return new Redis(url, { lazyConnect: false, maxRetriesPerRequest: 2, connectTimeout: 3000 });
}

/** True when PING answers within 3 s. */
export async function redisReachable(url = REDIS_TEST_URL): Promise<boolean> {
  const r = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, connectTimeout: 3000, retryStrategy: () => null });
  r.on('error', () => {}); // the rejected connect() says it already
  try {
    await r.connect();
    return (await r.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    r.disconnect();
  }
}

/** Resolves once per file: the probe result, with one line explaining a skip. */
export async function requireRedis(what: string): Promise<boolean> {
  const ok = await redisReachable();
  if (!ok) console.warn(`SKIPPED ${what}: Redis is unreachable at ${REDIS_TEST_URL} (run scripts/ci-services.sh or set GW_TEST_REDIS)`);
  return ok;
}

/** A key prefix no other run uses (no braces: the hash tag must be the implementation's). */
export function freshPrefix(name: string): string {
  return `gwtest:${name}:${process.pid}:${Math.random().toString(36).slice(2, 10)}:`;
}

/** Deletes every key under `prefix` (SCAN, never KEYS or FLUSHALL: the server is shared). */
export async function dropPrefix(prefix: string, url = REDIS_TEST_URL): Promise<number> {
  const r = redisClient(url);
  let deleted = 0;
  try {
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length) deleted += await r.unlink(...keys);
    } while (cursor !== '0');
  } finally {
    r.disconnect();
  }
  return deleted;
}

/**
 * Deletes the keys of test runs that are gone (freshPrefix: gwtest:<name>:<pid>:<random>:): a run killed
 * before its cleanup leaves them behind. A live process's keys are never touched. Returns how many went.
 */
export async function dropStalePrefixes(url = REDIS_TEST_URL): Promise<number> {
  const r = redisClient(url);
  const stale = new Set<string>();
  try {
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', 'gwtest:*', 'COUNT', 1000);
      cursor = next;
      for (const k of keys) {
        const m = /^(gwtest:[^:]+:(\d+):[a-z0-9]+:)/.exec(k);
        if (m && Number(m[2]) !== process.pid && !alive(Number(m[2]))) stale.add(m[1]!);
      }
    } while (cursor !== '0');
  } finally {
    r.disconnect();
  }
  let deleted = 0;
  for (const prefix of stale) deleted += await dropPrefix(prefix, url);
  return deleted;
}

function alive(pid: number): boolean {
  try { process.kill(pid, 0); return true; } catch (e) { return (e as { code?: string }).code === 'EPERM'; }
}

/** A throwaway redis-server on a free loopback port (no persistence), for FLUSHALL/restart tests. */
export async function privateRedis(): Promise<{ url: string; stop: () => Promise<void> }> {
  const port = freePort();
  const proc = Bun.spawn(['redis-server', '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdout: 'ignore',
    stderr: 'ignore',
  });
  const url = `redis://127.0.0.1:${port}`;
  for (let i = 0; i < 50 && !(await redisReachable(url)); i++) await Bun.sleep(100);
  return {
    url,
    stop: async () => {
      proc.kill();
      await proc.exited;
    },
  };
}

function freePort(): number {
  const s = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

/**
 * Marks a fresh prefix's shared admission as settled (its epoch in the past), as a cluster that has run
 * past its first recovery window is; tests of the window itself leave it unset (or delete it).
 */
export async function settleAdmissionEpoch(prefix: string, url = REDIS_TEST_URL): Promise<void> {
  const r = redisClient(url);
  try {
    await r.set(`${prefix}{epoch}`, '0');
  } finally {
    r.disconnect();
  }
}
