/**
 * `bun run bench/idle-gap.ts`: how long one hop takes after the processes on it sat idle, interleaved in one
 * process so that load from others hits every gap alike. Each sample: two warm-up hops back to back, then
 * `gap` ms of sleep (no CPU used), then the measured hop. Hops: a Redis `EVALSHA` (a small script, the shape
 * of an admission's hold) and a fetch of the upstream double (bench/upstream-proc.ts) to its response headers.
 *
 * Why: at one client, a PostgreSQL-mode request starts right after the previous answer's commit (milliseconds
 * idle), a SQLite-mode one ~0.3 ms after the previous answer: the same hop measured back to back in a script
 * says little about it in the gateway (README: Performance, Storage modes).
 * Env: BENCH_GAPS (0,1,3,6 ms), BENCH_N (1000 samples per gap and hop), BENCH_REDIS_URL (GW_TEST_REDIS or
 * redis://127.0.0.1:6379).
 */
import Redis from 'ioredis';
import { resolve } from 'node:path';
import { quantiles } from './lib/latency';
import { spawnJson } from './lib/procs';

const GAPS = (process.env.BENCH_GAPS ?? '0,1,3,6').split(',').map(Number);
const N = Number(process.env.BENCH_N ?? 1000);
const REDIS_URL = process.env.BENCH_REDIS_URL ?? process.env.GW_TEST_REDIS ?? 'redis://127.0.0.1:6379';
const key = `gwbench:idle-gap:${process.pid}`;

const upstream = await spawnJson(['bench/upstream-proc.ts'], resolve(import.meta.dir, '..'));
const redis = new Redis(REDIS_URL);
try {
  const sha = (await redis.script('LOAD', "local t = redis.call('TIME') redis.call('HINCRBY', KEYS[1], 'held', 1) redis.call('PEXPIRE', KEYS[1], 60000) return {1, tonumber(t[1])}")) as string;
  const body = JSON.stringify({ model: 'bench-model', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });
  const headers = { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', 'x-api-key': 'bench-upstream-key' };
  const hops = {
    evalsha: async () => { await redis.evalsha(sha, 1, key); },
    fetch: async () => {
      const t = performance.now();
      const res = await fetch(`${upstream.info.url}/v1/messages`, { method: 'POST', headers, body });
      const d = performance.now() - t;
      await res.arrayBuffer();
      return d;
    },
  };
  const timed = async (hop: () => Promise<number | void>) => {
    const t = performance.now();
    const d = await hop();
    return typeof d === 'number' ? d : performance.now() - t;
  };
  const samples = new Map<string, number[]>();
  for (let i = 0; i < 200; i++) for (const hop of Object.values(hops)) await hop();
  for (let i = 0; i < N; i++) {
    for (const [name, hop] of Object.entries(hops)) {
      for (const gap of GAPS) {
        await hop();
        await hop();
        if (gap > 0) await Bun.sleep(gap);
        const k = `${name} ${gap}`;
        if (!samples.has(k)) samples.set(k, []);
        samples.get(k)!.push(await timed(hop));
      }
    }
  }
  const load = (await Bun.file('/proc/loadavg').text()).split(' ').slice(0, 3).join(' ');
  console.log(`One hop after an idle gap (${N} samples each, interleaved; ${new Date().toISOString()}, load average ${load}, Bun ${Bun.version})`);
  console.log('| hop | ' + GAPS.map((g) => `after ${g} ms idle: p50 / p75`).join(' | ') + ' |');
  console.log('|---|' + GAPS.map(() => '---:').join('|') + '|');
  for (const name of Object.keys(hops)) {
    console.log(`| ${name === 'fetch' ? 'upstream fetch to its headers' : 'Redis EVALSHA round trip'} | ` + GAPS.map((g) => {
      const xs = samples.get(`${name} ${g}`)!;
      const sorted = [...xs].sort((a, b) => a - b);
      return `${quantiles(xs).p50.toFixed(3)} / ${sorted[Math.floor(sorted.length * 0.75)]!.toFixed(3)} ms`;
    }).join(' | ') + ' |');
  }
} finally {
  await redis.del(key).catch(() => {});
  redis.disconnect();
  upstream.proc.kill('SIGTERM');
}
