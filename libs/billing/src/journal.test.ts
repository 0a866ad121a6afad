import { afterEach, beforeEach, expect, test } from 'bun:test';
import { appendFileSync, closeSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChangeBus } from '@gw/core';
import { LedgerRepo, PricesRepo, SettlementsRepo, UsersRepo, apiKeys, openDatabase, type DbHandle, type PriceRow } from '@gw/db';
import { SettlementJournal, linesOf } from './journal';
import { PriceBook } from './price-book';
import { QuotaService } from './quota';

let dir: string;
let h: DbHandle;
let userId: number;
let keyId: number;
let priceRows: PriceRow[];

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'journal-'));
  h = openDatabase(join(dir, 'db.sqlite'), { checkpointMs: 0 });
  const users = new UsersRepo(h.db);
  userId = (await users.insert({ username: 'u', passwordHash: 'x', createdAt: 1, updatedAt: 1 })).id;
  await new LedgerRepo(h.db).apply({ userId, kind: 'topup', amount: 10_000, ref: 't', at: 1 });
  await new PricesRepo(h.db).upsert({ model: 'm', input: 1_000_000, output: 2_000_000, cacheRead: 0, cacheWrite: 0, updatedAt: 1 });
  priceRows = await new PricesRepo(h.db).all();
  keyId = h.db.insert(apiKeys).values({ userId, keyHash: 'h', prefix: 'sk-', createdAt: 1, updatedAt: 1 }).returning().get().id;
});
afterEach(async () => { h.close(); rmSync(dir, { recursive: true, force: true }); });

/** A QuotaService as a fresh process would build it on this database and journal folder. */
function boot(flushMs = 60_000, journaled = true, segmentBytes?: number, failing?: string): QuotaService {
  const bus = new ChangeBus();
  const prices = new PriceBook(new PricesRepo(h.db), bus, priceRows);
  const sink = new SettlementsRepo(h.sqlite);
  if (failing) {
    const apply = sink.apply.bind(sink);
    sink.apply = (r) => { if (r.requestId.startsWith(failing)) throw new Error('disk full'); return apply(r); };
  }
  return new QuotaService({ sink, prices, bus, journal: journaled ? new SettlementJournal(join(dir, 'journal'), segmentBytes) : null, flushMs });
}

/** Waits for the background unlink of sealed segments (the first one retired stays, emptied, as the spare). */
async function segmentsSettle(want: number): Promise<string[]> {
  for (let i = 0; i < 100 && segments().length !== want; i++) await Bun.sleep(5);
  return segments();
}
/** Every complete line left in the journal's segments: what a restart would replay. */
const journaled = () => segments().sort().flatMap((f) => linesOf(readFileSync(join(dir, 'journal', f), 'utf8')).map((l) => JSON.parse(l).requestId));

const log = (requestId: string, input: number, output: number) => ({
  requestId, userId, apiKeyId: keyId, channelId: 1, model: 'm', upstreamModel: 'm', stream: false,
  usage: { input, output, cacheRead: 0, cacheWrite: 0 }, latencyMs: 1, ttftMs: 1, status: 200, errorCode: '', attempts: 1, ip: '',
});
/** Journal segments on disk (the folder also holds the owner's pid file). */
const segments = () => readdirSync(join(dir, 'journal')).filter((f) => f.endsWith('.jsonl'));
const rows = () => h.sqlite.query('select request_id, cost from usage_logs order by request_id').all();
const quota = () => (h.sqlite.query('select quota from users where id = ?').get(userId) as any).quota;

test('recorded settlements count as spent before they are written, and are written once', async () => {
  const q = boot();
  const r = q.reserveLocal({ userId, apiKey: { id: keyId, unlimitedQuota: true, remainQuota: 0 }, amount: 100, ref: 'a' });
  expect(q.record(r, log('a', 10, 5))).toBe(20);
  expect(rows()).toEqual([]);
  // Not yet in the table, but no longer spendable: reservation released, charge pending.
  expect(q.available(userId)).toBe(10_000 - 20);
  q.flush();
  expect(rows()).toEqual([{ request_id: 'a', cost: 20 }]);
  expect(quota()).toBe(10_000 - 20);
  expect(q.available(userId)).toBe(10_000 - 20);
  // The segment stays open for the next batches (its committed rows replay as no-ops); shutdown removes it.
  expect(segments()).toEqual(['settle-1.jsonl']);
  q.close();
  expect(segments()).toEqual([]);
});

test('one segment serves many batches; one that cannot take the next line is sealed then, and deleted once the batch holding its lines committed', async () => {
  const q = boot(60_000, true, 1200);
  q.record(null, log('s1', 10, 0));
  q.flush();
  q.record(null, log('s2', 10, 0));
  q.flush();
  expect(segments()).toEqual(['settle-1.jsonl']);
  for (let i = 0; i < 4; i++) q.record(null, log(`s3-${i}`, 10, 0)); // past 1200 bytes (a row is about 510 bytes: two stay under it)
  const all = segments().sort();
  expect(all.length).toBeGreaterThan(2);
  expect(journaled()).toEqual(['s1', 's2', 's3-0', 's3-1', 's3-2', 's3-3']);
  const open = `settle-${all.length}.jsonl`;
  q.flush();
  // The sealed ones go, but for one kept emptied (the spare); the open one stays for the next batches.
  expect(await segmentsSettle(2)).toContain(open);
  expect(journaled()).toEqual(linesOf(readFileSync(join(dir, 'journal', open), 'utf8')).map((l) => JSON.parse(l).requestId));
  // The spare becomes the next segment, renamed after the open one.
  const before = segments().length;
  let n = 0;
  while (!segments().includes(`settle-${all.length + 1}.jsonl`) && n < 10) q.record(null, log(`s4-${n++}`, 10, 0));
  expect(segments().length).toBe(before);
  q.flush();
  expect((rows() as unknown[]).length).toBe(6 + n);
  expect(quota()).toBe(10_000 - 60 - 10 * n);
  // Killed now: the open segment's committed lines replay as no-ops.
  boot();
  expect((rows() as unknown[]).length).toBe(6 + n);
  expect(quota()).toBe(10_000 - 60 - 10 * n);
  expect(segments()).toEqual([]);
});

test('a line longer than a segment gets a segment of its own', async () => {
  const q = boot(60_000, true, 200);
  q.record(null, log('big', 10, 0));
  q.record(null, log('big2', 10, 0));
  expect(segments().sort()).toEqual(['settle-1.jsonl', 'settle-2.jsonl']);
  boot(); // killed before any flush
  expect(rows()).toEqual([{ request_id: 'big', cost: 10 }, { request_id: 'big2', cost: 10 }]);
});

test('a line is in the file once append returns: a process killed with SIGKILL right after loses nothing', async () => {
  const journalDir = join(dir, 'killed');
  const script = join(dir, 'append.ts');
  await Bun.write(script, `
    import { SettlementJournal } from ${JSON.stringify(join(import.meta.dir, 'journal.ts'))};
    const j = new SettlementJournal(${JSON.stringify(journalDir)});
    for (let i = 0; i < 50; i++) j.append({ requestId: 'r' + i, userId: 1, cost: i } as any);
    process.stdout.write('appended\\n');
    setInterval(() => {}, 1000);
  `);
  const child = Bun.spawn([process.execPath, script], { stdout: 'pipe', stderr: 'inherit' });
  const reader = child.stdout.getReader();
  let out = '';
  while (!out.includes('appended')) out += new TextDecoder().decode((await reader.read()).value);
  child.kill('SIGKILL');
  await child.exited;
  const left = new SettlementJournal(journalDir).leftovers();
  expect(left.flatMap((s) => s.rows.map((r) => r.requestId))).toEqual(Array.from({ length: 50 }, (_, i) => `r${i}`));
}, 15_000);

test('a kill after some batches of a kept segment committed: the restart charges the rest, the committed ones not again', async () => {
  const first = boot();
  first.record(null, log('c1', 10, 0));
  first.flush();
  first.record(null, log('c2', 20, 0));
  // killed here: c1 committed, c2 only journaled, both in settle-1
  boot();
  expect(rows()).toEqual([{ request_id: 'c1', cost: 10 }, { request_id: 'c2', cost: 20 }]);
  expect(quota()).toBe(10_000 - 30);
  expect(await new LedgerRepo(h.db).sum(userId)).toBe(10_000 - 30);
  expect(segments()).toEqual([]);
});

test('a settlement that failed for good ("nothing charged") is never replayed later: its segment goes at once', async () => {
  const q = boot(60_000, true, undefined, 'bad-1');
  q.record(null, log('ok-1', 10, 0));
  // Its write fails for good (this process's sink throws on it); the others of the batch still commit.
  const failed = q.settleAsync(null, log('bad-1', 10, 0));
  q.flush();
  await expect(failed).rejects.toThrow('disk full');
  // Its segment was retired at once: emptied (kept as the spare), nothing left to replay.
  expect(journaled()).toEqual([]);
  boot(); // a later restart finds nothing to replay
  expect(rows()).toEqual([{ request_id: 'ok-1', cost: 10 }]);
  expect(quota()).toBe(10_000 - 10);
});

test('a restart replays what a killed process journaled, skips a torn last line, and never charges twice', async () => {
  const first = boot();
  first.record(null, log('k1', 10, 0));
  first.record(null, log('k2', 0, 10));
  // The kill landed mid-write: a torn line that no one was ever told was recorded.
  // In the segment's zeros right after the last line, as the copy left it, and at the end of the file.
  const [segment] = segments();
  const path = join(dir, 'journal', segment!);
  const fd = openSync(path, 'r+');
  writeSync(fd, '{"requestId":"k3","ki', readFileSync(path).indexOf(0));
  closeSync(fd);
  appendFileSync(path, '{"requestId":"k4","ki');
  // k1 also reached the table before the kill (e.g. a flush was under way): replay must not charge it again.
  boot(60_000, false).settle(null, log('k1', 10, 0));
  expect(quota()).toBe(10_000 - 10);

  boot(); // the next process
  expect(rows()).toEqual([{ request_id: 'k1', cost: 10 }, { request_id: 'k2', cost: 20 }]);
  expect(quota()).toBe(10_000 - 30);
  expect(await new LedgerRepo(h.db).sum(userId)).toBe(10_000 - 30);
  expect(segments()).toEqual([]);
  boot();
  expect(quota()).toBe(10_000 - 30);
});

test('a settlement that failed for good is off the disk when flush returns, also when a spare exists (a kill right after must not replay it)', async () => {
  const q = boot(60_000, true, 1200, 'bad-');
  const failures: Promise<string>[] = [];
  let ok = 0;
  // Repeated: before the fix the failed segment went by a background truncate, which a kill could beat.
  for (let round = 0; round < 20; round++) {
    // Fill and seal segments, then commit them: one retired segment stays as the spare.
    for (let i = 0; i < 3; i++, ok++) q.record(null, log(`f-${round}-${i}`, 10, 0));
    q.flush();
    const failed = q.settleAsync(null, log(`bad-${round}`, 10, 0));
    failures.push(failed.then(() => 'charged', (e) => String(e)));
    q.flush();
    // Synchronously, as a SIGKILL landing now would leave the folder: nothing answered "nothing charged" may replay.
    expect(journaled().filter((id) => id.startsWith('bad-'))).toEqual([]);
  }
  for (const f of await Promise.all(failures)) expect(f).toContain('disk full');
  boot(); // the restart after such a kill
  expect((rows() as Array<{ request_id: string }>).filter((r) => r.request_id.startsWith('bad-'))).toEqual([]);
  expect(quota()).toBe(10_000 - 10 * ok);
});
