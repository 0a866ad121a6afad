/** What benches that start real gateways need around them: a free port, and dropping the Redis keys they left. */
import Redis from 'ioredis';

/** A TCP port on 127.0.0.1 that was free a moment ago (listened on, then closed). */
export function freePort(): number {
  const s = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

/** Unlinks every key under `prefix` on the Redis at `url`; returns how many went. */
export async function dropRedisPrefix(url: string, prefix: string): Promise<number> {
  const r = new Redis(url, { maxRetriesPerRequest: 2, connectTimeout: 3000 });
  let n = 0;
  try {
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length) n += await r.unlink(...keys);
    } while (cursor !== '0');
  } finally {
    r.disconnect();
  }
  return n;
}
