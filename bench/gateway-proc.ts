/**
 * Benchmark gateway: the real server (auth, routing, metering, usage logs on) on a temp SQLite file,
 * with one channel to each upstream given in argv[2] (comma-separated), a price, a funded user and a relay key.
 * Prints {"url","key","keys","admin"} on stdout (admin: a root access token, for /metrics; keys: one relay
 * key for each of BENCH_USERS funded users, default 1, the first being `key`).
 */
import { silentLogger } from '@gw/core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '@gw/config';
import { createServices } from '../apps/server/src/services';
import { listen } from '../apps/server/src/app';

const upstreamUrl = process.argv[2]!;
const dir = mkdtempSync(join(tmpdir(), 'gw-bench-'));
const config = loadConfig({ DATABASE_URL: `sqlite:${join(dir, 'gateway.db')}`, ROOT_PASSWORD: 'bench-root-password', HOST: '127.0.0.1', ...(process.env.BENCH_GW_ENV ? JSON.parse(process.env.BENCH_GW_ENV) : {}) });
const s = await createServices(config, silentLogger);
// BENCH_CHANNEL: extra channel fields as JSON (e.g. overrides), to measure what they cost on the request path.
// Several upstreams (comma-separated): one channel each, equal weight, so requests spread over them.
for (const [i, base] of upstreamUrl.split(',').entries()) {
  await s.channels.create({ name: i ? `bench${i}` : 'bench', type: 'anthropic', base_url: base, key: 'bench-upstream-key', models: ['bench-model'], ...(process.env.BENCH_CHANNEL ? JSON.parse(process.env.BENCH_CHANNEL) : {}) } as any);
}
await s.relay.prices.upsert({ model: 'bench-model', input: 3_000_000, output: 15_000_000, cache_read: 300_000, cache_write: 3_750_000 });
const now = Math.floor(Date.now() / 1000);
const keys: string[] = [];
for (let i = 0; i < Math.max(1, Number(process.env.BENCH_USERS ?? 1)); i++) {
  const user = await s.users.insert({ username: i ? `bench${i}` : 'bench', passwordHash: 'x', createdAt: now, updatedAt: now });
  await s.ledger.apply({ userId: user.id, kind: 'topup', amount: 1e15, ref: `bench-seed-${i}`, at: now });
  keys.push((await s.apiKeys.create((await s.users.byId(user.id))!, { name: 'bench' } as any)).key);
}
const key = keys[0]!;
const admin = (await s.auth.createAccessToken((await s.users.byUsername(config.rootUsername))!.id, 'bench')).token;
const app = listen(s, 0, '127.0.0.1');
console.log(JSON.stringify({ url: `http://127.0.0.1:${app.server!.port}`, key, keys, admin }));
const stop = async () => { await app.stop(true); await s.close(); rmSync(dir, { recursive: true, force: true }); process.exit(0); };
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
