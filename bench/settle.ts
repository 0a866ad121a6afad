/**
 * `bun run bench/settle.ts`: the cost of one metering write (settle alone, group-committed, ledger apply),
 * in-process on a temp SQLite file. A micro-benchmark for the settlement path, not for the wire.
 */
import { silentLogger } from '@gw/core';
import { newRequestId } from '@gw/core';
import { mkdtempSync } from 'node:fs'; import { tmpdir } from 'node:os'; import { join } from 'node:path';
import { loadConfig } from '@gw/config';
import { createServices } from '../apps/server/src/services';
import type { Reservation } from '@gw/billing';
const dir = mkdtempSync(join(tmpdir(), 'gw-s-'));
const s = await createServices(loadConfig({ DATABASE_URL: `sqlite:${join(dir, 'g.db')}`, ROOT_PASSWORD: 'xxxxxxxxxx' }), silentLogger);
await s.relay.prices.upsert({ model: 'm', input: 3_000_000, output: 15_000_000, cache_read: 300_000, cache_write: 3_750_000 } as any);
const now = Math.floor(Date.now() / 1000);
const user = await s.users.insert({ username: 'bench', passwordHash: 'x', createdAt: now, updatedAt: now });
await s.ledger.apply({ userId: user.id, kind: 'topup', amount: 1e15, ref: 'seed', at: now });
const { key } = await s.apiKeys.create((await s.users.byId(user.id))!, { name: 'bench' } as any);
const rec = s.apiKeys.lookup(key)!;
const N = 5000;
const log = (i: number) => ({ requestId: newRequestId(), userId: user.id, apiKeyId: rec.id, channelId: 1, model: 'm', upstreamModel: 'm', stream: false,
  usage: { input: 10, output: 20, cacheRead: 0, cacheWrite: 0 }, latencyMs: 1, ttftMs: 1, status: 200, errorCode: '', attempts: 1, ip: '127.0.0.1' });
let t0 = performance.now();
for (let i = 0; i < N; i++) { const r = s.relay.quota.reserve({ userId: user.id, apiKey: rec, amount: 100, ref: 'x' + i }) as Reservation; s.relay.quota.settle(r, log(i)); }
console.log('settle per call µs', ((performance.now() - t0) * 1000 / N).toFixed(1));
t0 = performance.now();
await Promise.all(Array.from({ length: N }, (_, i) => { const r = s.relay.quota.reserve({ userId: user.id, apiKey: rec, amount: 100, ref: 'y' + i }) as Reservation; return s.relay.quota.settleAsync(r, log(i + N)); }));
console.log('settleAsync (one batch) per call µs', ((performance.now() - t0) * 1000 / N).toFixed(1));
t0 = performance.now();
for (let i = 0; i < N; i++) await s.ledger.apply({ userId: user.id, kind: 'adjust', amount: 1, ref: 'a' + i, at: now });
console.log('ledger.apply own tx µs', ((performance.now() - t0) * 1000 / N).toFixed(1));
process.exit(0);
