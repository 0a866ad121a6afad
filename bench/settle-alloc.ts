/**
 * `bun run bench/settle-alloc.ts [<checkout> ...]`: JS heap bytes one settlement allocates on the SQLite path,
 * in one process per checkout (this one first), by part: the row (QuotaService's guard, pricing and row, no
 * write), the journal line, the batch write (SettlementsRepo, one transaction per BENCH_BATCH rows, default 32,
 * about what one 5 ms flush window holds), and the whole of it (finish(), the journal, a flush every BENCH_BATCH
 * settlements) less a reservation's own cost (reserve + release, measured apart). Each part runs BENCH_CALLS
 * (300,000) times between two full collections in a child started with BUN_JSC_logGC=1; the bytes allocated are
 * the sum over the collections in between of (heap size at a collection's start − size at the previous one's end),
 * as bench/alloc.ts counts them for a whole gateway. BENCH_ROUNDS (3) interleaved rounds; medians and ranges.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const CALLS = Number(process.env.BENCH_CALLS ?? 300_000);
const BATCH = Number(process.env.BENCH_BATCH ?? 32);
const PARTS = ['reserve', 'row', 'journal', 'write', 'finish'] as const;
type Part = (typeof PARTS)[number];

if (process.env.BENCH_SETTLE_ALLOC_CHILD) {
  await child(process.env.BENCH_SETTLE_ALLOC_CHILD);
  process.exit(0);
}

/** In the child: each part CALLS times between two markers on stderr (the GC log's file), with a full collection at each. */
async function child(checkout: string): Promise<void> {
  const { writeSync } = await import('node:fs');
  const mark = (s: string) => { Bun.gc(true); writeSync(2, `\nMARK ${s}\n`); };
  const { loadConfig } = await import(join(checkout, 'libs/config/src/index.ts'));
  const { silentLogger, newRequestId } = await import(join(checkout, 'libs/core/src/index.ts'));
  const { SettlementJournal } = await import(join(checkout, 'libs/billing/src/journal.ts'));
  const { createServices } = await import(join(checkout, 'apps/server/src/services.ts'));
  const dir = mkdtempSync(join(tmpdir(), 'gw-sa-'));
  const s = await createServices(loadConfig({ DATABASE_URL: `sqlite:${join(dir, 'g.db')}`, ROOT_PASSWORD: 'xxxxxxxxxx' }), silentLogger);
  await s.relay.prices.upsert({ model: 'm', input: 3_000_000, output: 15_000_000, cache_read: 300_000, cache_write: 3_750_000 });
  const now = Math.floor(Date.now() / 1000);
  const user = await s.users.insert({ username: 'bench', passwordHash: 'x', createdAt: now, updatedAt: now });
  await s.ledger.apply({ userId: user.id, kind: 'topup', amount: 1e15, ref: 'seed', at: now });
  const { key } = await s.apiKeys.create((await s.users.byId(user.id))!, { name: 'bench' });
  const rec = s.apiKeys.lookup(key)!;
  const quota: any = s.relay.quota;
  const price = s.relay.prices.get('m');
  const limits = { maxInput: 200_000, maxOutput: 64, input: 12 };
  // What the relay's usageLog builds for an answered JSON request (a plan with its price and limits).
  const log = (id: string) => ({ requestId: id, userId: user.id, apiKeyId: rec.id, channelId: 1, model: 'm', upstreamModel: 'm', stream: false,
    usage: { input: 10, output: 20, cacheRead: 0, cacheWrite: 0 }, estimate: undefined, estimated: undefined, latencyMs: 1, ttftMs: 1, status: 200,
    errorCode: '', attempts: 1, ip: '127.0.0.1', group: 'default', ratio: 1000, price, limits, overrides: '' });
  const reserve = (i: number) => quota.reserve({ userId: user.id, apiKey: rec, amount: 100, ref: `r${i}`, limits });
  const ids = Array.from({ length: CALLS + 20_000 }, () => newRequestId());
  const rows = Array.from({ length: BATCH }, (_, i) => quota.entry(reserve(i), log(ids[i]!)).row);
  const journal = new SettlementJournal(join(dir, 'j'));
  const sink = s.dbh.sqlite ? new (await import(join(checkout, 'libs/db/src/index.ts'))).SettlementsRepo(s.dbh.sqlite) : null;
  let n = 0;
  const run: Record<Part, (k: number) => void> = {
    reserve: (k) => { for (let i = 0; i < k; i++) quota.release(reserve(i)); },
    row: (k) => { for (let i = 0; i < k; i++) { const r = reserve(i); quota.entry(r, log(ids[n++ % ids.length]!)); quota.release(r); } },
    journal: (k) => { for (let i = 0; i < k; i++) { journal.append(rows[i % BATCH]); if (i % 2048 === 2047) journal.discard(journal.rotate(true)[0]); } },
    write: (k) => {
      for (let i = 0; i < k; i += BATCH) {
        sink.transaction(() => { for (let j = 0; j < BATCH; j++) { const row = rows[j]!; row.requestId = ids[n++ % ids.length]!; sink.apply(row); } });
      }
    },
    finish: (k) => { for (let i = 0; i < k; i++) { quota.finish(reserve(i), log(ids[n++ % ids.length]!)); if (i % BATCH === BATCH - 1) quota.flush(); } quota.flush(); },
  };
  for (const part of (process.env.BENCH_PARTS ?? PARTS.join(',')).split(',') as Part[]) {
    // Fresh request ids each time (a settled id would be a no-op write), warmed up first.
    n = 0;
    ids.forEach((_, i) => { ids[i] = newRequestId(); });
    run[part](20_000);
    mark(`${part} start`);
    run[part](CALLS);
    mark(`${part} end`);
  }
  rmSync(dir, { recursive: true, force: true });
}

/** Bytes allocated per call by part, from one child's GC log (the main thread's heap: the largest one logged). */
function perCall(log: string): Record<string, number> {
  const events = [...log.matchAll(/GC<(0x[0-9a-f]+)>: START \S+ (\d+)kb => \w+Collection(?:(?!START)[\s\S])*? => (\d+)kb, p=|MARK (\w+) (start|end)/g)];
  const largest = new Map<string, number>();
  for (const m of events) if (m[1]) largest.set(m[1], Math.max(largest.get(m[1]) ?? 0, Number(m[2])));
  const main = [...largest].sort((a, b) => b[1] - a[1])[0]?.[0];
  const out: Record<string, number> = {};
  let open: string | null = null;
  let prevEnd = 0;
  let kb = 0;
  for (const m of events) {
    if (m[4]) {
      if (m[5] === 'start') { open = m[4]; kb = 0; } else if (open) { out[open] = (kb * 1024) / CALLS; open = null; }
      continue;
    }
    if (m[1] !== main) continue;
    // A mark's own full collection (just before its line) ends the previous window and opens the next.
    if (open) kb += Math.max(0, Number(m[2]) - prevEnd);
    prevEnd = Number(m[3]);
  }
  return out;
}

const here = resolve(import.meta.dir, '..');
const dirs = [here, ...process.argv.slice(2).map((d) => resolve(d))];
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const results = dirs.map(() => new Map<string, number[]>());
for (let round = 0; round < ROUNDS; round++) {
  const order = dirs.map((_, i) => i);
  if (round % 2) order.reverse();
  for (const i of order) {
    const logFile = join(tmpdir(), `gw-settle-alloc-${process.pid}-${i}.log`);
    const p = Bun.spawn([process.execPath, import.meta.path], { cwd: dirs[i], env: { ...process.env, BUN_JSC_logGC: '1', BENCH_SETTLE_ALLOC_CHILD: dirs[i]! }, stderr: Bun.file(logFile), stdout: 'inherit' });
    if ((await p.exited) !== 0) throw new Error(`${dirs[i]}: child failed, see ${logFile}`);
    const r = perCall(readFileSync(logFile, 'utf8'));
    rmSync(logFile, { force: true });
    for (const [k, v] of Object.entries(r)) results[i]!.set(k, [...(results[i]!.get(k) ?? []), v]);
    console.error(`${dirs[i]}: ${Object.entries(r).map(([k, v]) => `${k} ${v.toFixed(0)}`).join(', ')} B per call`);
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const cell = (xs: number[] | undefined) => (xs?.length ? `${median(xs).toFixed(0)} (${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)})` : '–');
console.log(`\nJS heap bytes per call, median (range) of ${ROUNDS} rounds of ${CALLS} calls (batches of ${BATCH}; finish − reserve = one settlement)\n`);
console.log(`| checkout | ${PARTS.join(' | ')} | finish − reserve |`);
console.log(`| --- |${PARTS.map(() => ' ---: |').join('')} ---: |`);
for (const [i, dir] of dirs.entries()) {
  const r = results[i]!;
  const f = r.get('finish') ?? [];
  const diff = f.map((v, k) => v - (r.get('reserve')?.[k] ?? 0));
  console.log(`| ${dir} | ${PARTS.map((p) => cell(r.get(p))).join(' | ')} | ${cell(diff)} |`);
}
