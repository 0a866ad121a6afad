/**
 * `bun run bench/admission.ts`: round-trip latency of admission, in-process against Redis.
 * Per phase, `c` workers loop for BENCH_SECONDS (default 3) on:
 *   - hold: HoldStore reserve + release (one hot user, as the worst case for contention);
 *   - rpm:  RateLimits.hit (one key, limit never reached);
 *   - slot: RateLimits.acquire + release.
 * Redis at REDIS_URL (default redis://127.0.0.1:6379), keys under a private prefix removed at the end.
 */
import Redis from 'ioredis';
import { MemoryRateLimits, type RateLimits } from '@gw/core';
import { RedisRateLimits } from '@gw/core/redis/rate-limits';
import { MemoryHoldStore, type HoldStore, type MirrorLoader } from '@gw/billing';
import { RedisHoldStore } from '@gw/billing/holds/redis';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const prefix = `gwbench:${process.pid}:`;
const load: MirrorLoader = async () => ({ user: { balance: 1e15, version: 1 }, key: null });

type Op = (i: number) => Promise<unknown>;

async function phase(op: Op, c: number): Promise<{ ops: number; p50: number; p99: number }> {
  // Warm-up: scripts loaded, connections open, JIT settled.
  await Promise.all(Array.from({ length: c }, async (_, w) => { for (let i = 0; i < 200; i++) await op(w * 1e6 + i); }));
  const lat: number[] = [];
  const end = performance.now() + SECONDS * 1000;
  let n = 0;
  await Promise.all(Array.from({ length: c }, async () => {
    while (performance.now() < end) {
      const t = performance.now();
      await op(++n);
      lat.push(performance.now() - t);
    }
  }));
  lat.sort((a, b) => a - b);
  const q = (p: number) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))]!;
  return { ops: lat.length / SECONDS, p50: q(0.5), p99: q(0.99) };
}

function ops(holds: HoldStore, limits: RateLimits, tag: string): Record<string, Op> {
  return {
    hold: async (i) => {
      const r = await holds.reserve({ userId: 1, amount: 100, ref: `${tag}-${i}-${Math.random()}`, leaseMs: 30_000 });
      if (!r.ok) throw new Error(`reserve refused: ${JSON.stringify(r)}`);
      await holds.release(r.hold);
    },
    rpm: (i) => limits.hit('bench-key', { limit: 1e12, windowMs: 60_000 }),
    slot: async () => {
      const l = await limits.acquire('bench-slots', { max: 1e6, leaseMs: 30_000 });
      if (l) await limits.release(l);
    },
  };
}

const redis = new Redis(REDIS_URL);
const targets: Array<[string, Record<string, Op>]> = [
  ['in-process', ops(new MemoryHoldStore(load), new MemoryRateLimits(), 'm')],
  ['redis (ioredis)', ops(new RedisHoldStore(redis, load, { prefix, recoveryMs: 0 }), new RedisRateLimits(redis, prefix), 'r')],
];

console.log(`| target | op | conc. | ops/s | p50 ms | p99 ms |\n|---|---|---|---|---|---|`);
for (const [name, o] of targets) {
  for (const [opName, op] of Object.entries(o)) {
    for (const c of [1, 16]) {
      const r = await phase(op, c);
      console.log(`| ${name} | ${opName} | ${c} | ${Math.round(r.ops).toLocaleString('en-US')} | ${r.p50.toFixed(3)} | ${r.p99.toFixed(3)} |`);
    }
  }
}

let cursor = '0';
do {
  const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
  cursor = next;
  if (keys.length) await redis.unlink(...keys);
} while (cursor !== '0');
redis.disconnect();
