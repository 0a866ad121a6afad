/**
 * `bun run bench/budgets.ts`: what budgets add to a request's metering, in-process on a temp SQLite file.
 * One cycle = reserve + record + (every 64 cycles) a batch flush, the request path's quota work. Three
 * QuotaServices on the same database, measured in interleaved rounds so machine load hits all alike:
 * no BudgetBook (the release before budgets), a BudgetBook but no budget on the user (every deployment
 * that sets none), and a daily budget plus a low-balance threshold on the user.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChangeBus } from '@gw/core';
import { BudgetChargesRepo, BudgetsRepo, LedgerRepo, PricesRepo, SettlementsRepo, UsersRepo, apiKeys, budgets, lowBalanceAlerts, openDatabase } from '@gw/db';
import { BudgetBook, PriceBook, QuotaService, type Reservation } from '@gw/billing';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 21);
const CYCLES = 2000;
const h = openDatabase(join(mkdtempSync(join(tmpdir(), 'gw-bb-')), 'g.db'));
const bus = new ChangeBus();
const users = new UsersRepo(h.db);
const prices = await PriceBook.load(new PricesRepo(h.db), bus);
await prices.upsert({ model: 'm', input: 1_000_000, output: 1_000_000, cache_read: 0, cache_write: 0 });
const ledger = new LedgerRepo(h.db, bus);
const mk = async (name: string) => {
  const id = (await users.insert({ username: name, passwordHash: 'x', createdAt: 1, updatedAt: 1 })).id;
  await ledger.apply({ userId: id, kind: 'topup', amount: 1e15, ref: `seed-${id}`, at: 1 });
  const keyId = h.db.insert(apiKeys).values({ userId: id, keyHash: name, prefix: 'sk-', createdAt: 1, updatedAt: 1 }).returning().get().id;
  return { id, key: { id: keyId, unlimitedQuota: true, remainQuota: 0 } };
};
const plain = await mk('plain');
const unbudgeted = await mk('unbudgeted');
const budgeted = await mk('budgeted');
h.db.insert(budgets).values({ scope: 'user', subjectId: budgeted.id, period: 'daily', limitAmount: 1e15, createdAt: 1, updatedAt: 1 }).run();
h.db.insert(lowBalanceAlerts).values({ userId: budgeted.id, threshold: 1, createdAt: 1, updatedAt: 1 }).run();
const book = new BudgetBook({ repo: new BudgetsRepo(h.db), charges: new BudgetChargesRepo(h.sqlite), deliver: false });
const quota = (withBook: boolean) => new QuotaService({ sink: new SettlementsRepo(h.sqlite), prices, bus, budgets: withBook ? book : undefined, flushMs: 60_000 });
const cases = [['no BudgetBook', quota(false), plain], ['BudgetBook, no budget', quota(true), unbudgeted], ['daily budget + low-balance', quota(true), budgeted]] as const;

let seq = 0;
function round(q: QuotaService, u: typeof plain): number {
  const t = performance.now();
  for (let i = 0; i < CYCLES; i++) {
    const ref = `r${++seq}`;
    const r = q.reserve({ userId: u.id, apiKey: u.key, amount: 200, ref }) as Reservation; // synchronous in one process
    q.record(r, { requestId: ref, userId: u.id, apiKeyId: u.key.id, channelId: 1, model: 'm', upstreamModel: 'm', stream: false,
      usage: { input: 100, output: 50 }, latencyMs: 1, ttftMs: 1, status: 200, errorCode: '', attempts: 1, ip: '' });
    if (i % 64 === 63) q.flush();
  }
  q.flush();
  return ((performance.now() - t) * 1000) / CYCLES;
}

for (const [, q, u] of cases) round(q, u); // warm-up
const samples = cases.map(() => [] as number[]);
// The order rotates each round, so none of the three always runs first (after the others' writes and garbage).
for (let r = 0; r < ROUNDS; r++) {
  for (let j = 0; j < cases.length; j++) {
    const i = (r + j) % cases.length;
    samples[i]!.push(round(cases[i]![1], cases[i]![2]));
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const base = median(samples[0]!);
for (const [i, [name]] of cases.entries()) {
  const m = median(samples[i]!);
  console.log(`${name.padEnd(28)} ${m.toFixed(2).padStart(7)} µs per request (median of ${ROUNDS} rounds)  ${i ? `${m - base >= 0 ? '+' : ''}${(m - base).toFixed(2)} µs, ${(((m - base) / base) * 100).toFixed(1)} %` : ''}`);
}
// The calls budgets add to a request of a user and key without budgets, alone (no I/O: they are the whole
// added cost of that path, far below what the interleaved rounds above can resolve on a busy machine).
{
  const N = 1_000_000;
  const t = performance.now();
  let sink = 0;
  for (let i = 0; i < N; i++) {
    const hold = book.reserve(unbudgeted.id, unbudgeted.key.id, 200);
    sink += book.cap(hold, unbudgeted.id, unbudgeted.key.id) > 0 ? 1 : 0;
    book.unpend(book.pend(unbudgeted.id, unbudgeted.key.id, 150), 150);
    sink += book.concerns(unbudgeted.id, unbudgeted.key.id) ? 1 : 0;
  }
  console.log(`budget calls of an unbudgeted request, alone: ${(((performance.now() - t) * 1e6) / N).toFixed(0)} ns per request (${sink})`);
}
h.close();
