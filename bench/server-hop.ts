/**
 * `bun run bench/server-hop.ts`: the PostgreSQL mode's admission hop without the gateway. A minimal Bun.serve
 * server answers each request with (a) a fetch of the upstream double, or (b) one ioredis `EVALSHA` (a small
 * script, the shape of a hold) and then that fetch; a client in another process alternates a and b, pausing
 * BENCH_THINK_MS (0) before each request, and the server reports its own times. Shows whether the hold's round
 * trip inside a server woken by a request costs what it costs a script (bench/idle-gap.ts) or more, with no
 * gateway code involved (README: Performance, Storage modes).
 * Env: BENCH_N (600 per kind), BENCH_THINK_MS (0), BENCH_SECOND (set: b sends a second EVALSHA right after the
 * first, timed apart: what the first hop after the server woke costs beyond the next), BENCH_REDIS_URL
 * (GW_TEST_REDIS or redis://127.0.0.1:6379).
 */
import Redis from 'ioredis';
import { resolve } from 'node:path';
import { spawnJson } from './lib/procs';

const N = Number(process.env.BENCH_N ?? 600);
const THINK_MS = Number(process.env.BENCH_THINK_MS ?? 0);
const SECOND = Boolean(process.env.BENCH_SECOND);
const seconds: number[] = [];
const REDIS_URL = process.env.BENCH_REDIS_URL ?? process.env.GW_TEST_REDIS ?? 'redis://127.0.0.1:6379';
const key = `gwbench:server-hop:${process.pid}`;

const upstream = await spawnJson(['bench/upstream-proc.ts'], resolve(import.meta.dir, '..'));
const upUrl = `${upstream.info.url}/v1/messages`;
const upBody = JSON.stringify({ model: 'bench-model', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });
const upHeaders = { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', 'x-api-key': 'bench-upstream-key' };
const redis = new Redis(REDIS_URL);
const sha = (await redis.script('LOAD', "local t = redis.call('TIME') redis.call('HINCRBY', KEYS[1], 'held', 1) redis.call('PEXPIRE', KEYS[1], 60000) return {1, tonumber(t[1])}")) as string;
const server = Bun.serve({
  port: 0, hostname: '127.0.0.1',
  async fetch(req) {
    const withHold = new URL(req.url).pathname === '/b';
    const t0 = performance.now();
    if (withHold) await redis.evalsha(sha, 1, key);
    const t1 = performance.now();
    if (withHold && SECOND) {
      await redis.evalsha(sha, 1, key);
      seconds.push(performance.now() - t1);
    }
    const t1f = performance.now();
    const res = await fetch(upUrl, { method: 'POST', headers: upHeaders, body: upBody });
    const t2 = performance.now();
    const body = await res.arrayBuffer();
    return new Response(body, { headers: { 'x-times': `${t1 - t0},${t2 - t1f}` } });
  },
});
const client = `
  const base = process.env.BASE, n = Number(process.env.N), think = Number(process.env.THINK);
  const out = { a: { ttfb: [], hold: [], fetch: [] }, b: { ttfb: [], hold: [], fetch: [] } };
  for (let i = 0; i < n + 100; i++) for (const k of ['a', 'b']) {
    if (think) await Bun.sleep(think);
    const t = performance.now();
    const res = await fetch(base + k, { method: 'POST', body: '{}' });
    const ttfb = performance.now() - t;
    await res.arrayBuffer();
    if (i < 100) continue;
    const [hold, f] = res.headers.get('x-times').split(',').map(Number);
    out[k].ttfb.push(ttfb); out[k].hold.push(hold); out[k].fetch.push(f);
  }
  console.log(JSON.stringify(out));`;
try {
  const p = Bun.spawn([process.execPath, '-e', client], { env: { ...process.env, BASE: `http://127.0.0.1:${server.port}/`, N: String(N), THINK: String(THINK_MS) }, stdout: 'pipe', stderr: 'inherit' });
  const out = JSON.parse(await new Response(p.stdout).text()) as Record<'a' | 'b', Record<'ttfb' | 'hold' | 'fetch', number[]>>;
  const p50 = (xs: number[]) => [...xs].sort((x, y) => x - y)[xs.length >> 1]!.toFixed(3);
  const load = (await Bun.file('/proc/loadavg').text()).split(' ').slice(0, 3).join(' ');
  console.log(`Server hop (${N} requests each, alternated, client pause ${THINK_MS} ms; p50 ms; load average ${load}, Bun ${Bun.version})`);
  for (const k of ['a', 'b'] as const) {
    console.log(`  ${k === 'a' ? 'fetch only      ' : 'EVALSHA + fetch '} client headers ${p50(out[k].ttfb)} | EVALSHA ${k === 'a' ? '-' : p50(out[k].hold)} | fetch to headers ${p50(out[k].fetch)}`);
  }
  // The server's own list also holds the 100 warm-up requests' seconds: left out like the client's.
  if (SECOND) console.log(`  second EVALSHA right after the first: ${p50(seconds.slice(100))}`);
} finally {
  server.stop(true);
  await redis.del(key).catch(() => {});
  redis.disconnect();
  upstream.proc.kill('SIGTERM');
}
