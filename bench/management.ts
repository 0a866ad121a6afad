/**
 * `bun run bench/management.ts`: latency of management writes (create, update, delete of a channel, an API
 * key, a user and a price) against a gateway that already holds N records of each kind.
 * For each N (BENCH_SIZES, default 10,10000,100000) the rows are seeded straight into a fresh SQLite file
 * (fast, in batches), then a real gateway process is started on it and the writes are timed over HTTP,
 * one at a time, BENCH_OPS (default 40) of each. A write that reloads or rebuilds everything shows up as
 * latency growing with N; an incremental one stays flat.
 * User creation includes an argon2id password hash (tens of ms, the same at every N): it is shown apart.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SecretBox } from '@gw/core';
import { apiKeys, channels, openDatabase, prices, users } from '@gw/db';
import { hashPassword } from '@gw/identity';
import { callJson, loginToken, startGatewayProcess } from '../tests/helpers/gateway-process';

const SIZES = (process.env.BENCH_SIZES ?? '10,10000,100000').split(',').map(Number);
const OPS = Number(process.env.BENCH_OPS ?? 40);
const SECRET_HEX = 'ab'.repeat(32);
const ROOT_PASSWORD = 'bench-root-password';
/** Seeded channels serve models from this pool, so a (group, model) list holds about N/MODEL_POOL channels. */
const MODEL_POOL = 100;
const BATCH = 500;

async function seed(path: string, n: number): Promise<void> {
  const h = openDatabase(path);
  const now = Math.floor(Date.now() / 1000);
  const sealed = new SecretBox(Buffer.from(SECRET_HEX, 'hex')).seal('sk-seeded-upstream-key');
  const rootHash = await hashPassword(ROOT_PASSWORD);
  h.db.insert(users).values({ username: 'root', passwordHash: rootHash, role: 100, createdAt: now, updatedAt: now }).run();
  for (let i = 0; i < n; i += BATCH) {
    const ids = Array.from({ length: Math.min(BATCH, n - i) }, (_, j) => i + j);
    h.sqlite.transaction(() => {
      h.db.insert(users).values(ids.map((k) => ({ username: `seed-${k}`, passwordHash: 'x', quota: 1000, createdAt: now, updatedAt: now }))).run();
      // Keys belong to the seeded users (ids 2..n+1), one each.
      h.db.insert(apiKeys).values(ids.map((k) => ({
        userId: k + 2, name: `seed-${k}`, keyHash: `seedhash-${k}`, prefix: 'sk-seed', createdAt: now, updatedAt: now,
      }))).run();
      h.db.insert(channels).values(ids.map((k) => ({
        name: `seed-${k}`, type: 'anthropic', baseUrl: 'http://127.0.0.1:9', key: sealed,
        keys: [{ id: 1, key: sealed, status: 1 as const, reason: '', disabledAt: null, createdAt: now }],
        models: [`model-${k % MODEL_POOL}`, `model-${(k + 1) % MODEL_POOL}`], modelMapping: {}, headers: {},
        priority: k % 5, createdAt: now, updatedAt: now,
      }))).run();
      h.db.insert(prices).values(ids.map((k) => ({ model: `seed-model-${k}`, input: 1000, output: 2000, updatedAt: now }))).run();
    })();
  }
  h.close();
}

interface Stat { p50: number; p95: number; max: number }
const stat = (xs: number[]): Stat => {
  const s = [...xs].sort((a, b) => a - b);
  return { p50: s[Math.floor(s.length / 2)]!, p95: s[Math.min(s.length - 1, Math.floor(s.length * 0.95))]!, max: s.at(-1)! };
};

async function timed(fn: () => Promise<{ status: number; body: any }>): Promise<[number, any]> {
  const t0 = performance.now();
  const r = await fn();
  const ms = performance.now() - t0;
  if (r.status !== 200) throw new Error(`management call failed: ${r.status} ${JSON.stringify(r.body)}`);
  return [ms, r.body?.data];
}

async function measure(n: number): Promise<{ startSeconds: number; rows: Record<string, Stat> }> {
  const dir = mkdtempSync(join(tmpdir(), 'gw-mgmt-bench-'));
  const path = join(dir, 'gateway.db');
  try {
    await seed(path, n);
    const t0 = performance.now();
    const gw = await startGatewayProcess({ DATABASE_URL: `sqlite:${path}`, SECRET_KEY: SECRET_HEX, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info' });
    const startSeconds = (performance.now() - t0) / 1000;
    try {
      const tok = await loginToken(gw.url, 'root', ROOT_PASSWORD);
      const call = (method: string, p: string, body?: unknown) => () => callJson(gw.url, method, p, body, tok);
      const out: Record<string, number[]> = {};
      const add = (k: string, ms: number) => (out[k] ??= []).push(ms);
      // Warm-up: one of each, not counted (JIT, statement caches).
      const owner = (await timed(call('POST', '/api/user/', { username: 'bench-owner', password: 'bench-password-1' })))[1].id as number;
      for (let i = 0; i < OPS; i++) {
        let [ms, d] = await timed(call('POST', '/api/channel/', { name: `bench-${i}`, type: 'anthropic', base_url: 'http://127.0.0.1:9', key: 'sk-bench', models: [`model-${i % MODEL_POOL}`] }));
        if (i) add('channel create', ms);
        const ch = d.id;
        [ms] = await timed(call('PUT', '/api/channel/', { id: ch, priority: 7 }));
        if (i) add('channel update', ms);
        [ms] = await timed(call('DELETE', `/api/channel/${ch}`));
        if (i) add('channel delete', ms);

        [ms, d] = await timed(call('POST', '/api/token/', { name: `bench-${i}`, user_id: owner }));
        if (i) add('key create', ms);
        const key = d.id;
        [ms] = await timed(call('PUT', '/api/token/', { id: key, name: `renamed-${i}` }));
        if (i) add('key update', ms);
        [ms] = await timed(call('DELETE', `/api/token/${key}`));
        if (i) add('key delete', ms);

        [ms, d] = await timed(call('POST', '/api/user/', { username: `bench-user-${i}`, password: 'bench-password-1' }));
        if (i) add('user create (incl. argon2id)', ms);
        const user = d.id;
        [ms] = await timed(call('PUT', '/api/user/', { id: user, display_name: `renamed ${i}` }));
        if (i) add('user update', ms);
        [ms] = await timed(call('DELETE', `/api/user/${user}`));
        if (i) add('user delete', ms);

        [ms] = await timed(call('PUT', '/api/pricing/', { model: `bench-model-${i}`, input: 1, output: 2 }));
        if (i) add('price create', ms);
        [ms] = await timed(call('PUT', '/api/pricing/', { model: `bench-model-${i}`, input: 3, output: 4 }));
        if (i) add('price update', ms);
        [ms] = await timed(call('DELETE', `/api/pricing/bench-model-${i}`));
        if (i) add('price delete', ms);
      }
      return { startSeconds, rows: Object.fromEntries(Object.entries(out).map(([k, v]) => [k, stat(v)])) };
    } finally {
      gw.proc.kill('SIGTERM');
      await gw.proc.exited;
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const f = (x: number) => x.toFixed(2);
const results: Array<[number, Awaited<ReturnType<typeof measure>>]> = [];
for (const n of SIZES) {
  const t0 = performance.now();
  const r = await measure(n);
  results.push([n, r]);
  console.error(`N=${n}: measured in ${((performance.now() - t0) / 1000).toFixed(1)} s (gateway start ${r.startSeconds.toFixed(1)} s)`);
}
console.log(`\nManagement writes over HTTP, ms p50 / p95 (${new Date().toISOString()}, ${navigator.hardwareConcurrency} cores, Bun ${Bun.version}; ${OPS - 1} of each, one at a time; N existing channels, keys, users and prices each)\n`);
console.log(`| write | ${results.map(([n]) => `N = ${n.toLocaleString('en-US')}`).join(' | ')} |`);
console.log(`|---|${results.map(() => '---:').join('|')}|`);
for (const k of Object.keys(results[0]![1].rows)) {
  console.log(`| ${k} | ${results.map(([, r]) => `${f(r.rows[k]!.p50)} / ${f(r.rows[k]!.p95)}`).join(' | ')} |`);
}
console.log(`| gateway start-up (s) | ${results.map(([, r]) => r.startSeconds.toFixed(1)).join(' | ')} |`);
