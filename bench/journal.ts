/**
 * `bun run bench/journal.ts`: the cost of making one settlement durable against a process kill, the
 * settlement journal's append (a copy into a mapped segment) against the baseline it replaced (one
 * `writeSync` of the line to an O_APPEND file), interleaved in one run (BENCH_ROUNDS, default 5, of
 * BENCH_ROWS, default 50,000). Both include the line's JSON.stringify; rows differ, as real ones do. The
 * journal retires its sealed segments after every BENCH_BATCH (20) lines, as a committed batch does.
 * CPU time of this thread (user + system), so system calls and page faults are counted.
 */
import { closeSync, constants, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SettlementJournal } from '../libs/billing/src/journal';
import type { SettlementRow } from '@gw/db';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const N = Number(process.env.BENCH_ROWS ?? 50_000);
const BATCH = Number(process.env.BENCH_BATCH ?? 20);
const dir = mkdtempSync(join(tmpdir(), 'gw-journal-'));
const row = (i: number) => ({
  requestId: `req_01JBENCH${String(i).padStart(12, '0')}`, userId: 1 + (i % 7), apiKeyId: 3, channelId: 1, model: 'bench-model',
  upstreamModel: 'bench-model', stream: i % 2 === 0, inputTokens: 12 + i % 100, outputTokens: 40, cacheReadTokens: 0, cacheWriteTokens: 0,
  cost: 123_456 + i, latencyMs: 3, ttftMs: 1, status: 200, errorCode: '', attempts: 1, ip: '127.0.0.1', createdAt: 1_764_355_200 + i,
}) as unknown as SettlementRow;
const rows = Array.from({ length: N }, (_, i) => row(i));
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1000; };

function baseline(round: number): number {
  const fd = openSync(join(dir, `baseline-${round}.jsonl`), constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT, 0o600);
  const t = cpu();
  for (const r of rows) writeSync(fd, `${JSON.stringify(r)}\n`);
  const ms = cpu() - t;
  closeSync(fd);
  return (ms * 1000) / N;
}

function journal(round: number): number {
  const j = new SettlementJournal(join(dir, `journal-${round}`));
  const t = cpu();
  for (let i = 0; i < N; i++) {
    j.append(rows[i]!);
    if (i % BATCH === BATCH - 1) for (const path of j.rotate()) j.discard(path);
  }
  const ms = cpu() - t;
  j.close();
  return (ms * 1000) / N;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const a: number[] = [];
const b: number[] = [];
for (let i = 0; i < ROUNDS; i++) {
  if (i % 2) { a.push(journal(i)); b.push(baseline(i)); } else { b.push(baseline(i)); a.push(journal(i)); }
}
rmSync(dir, { recursive: true, force: true });
console.log(`journal append: ${median(a).toFixed(2)} µs per settlement (rounds ${a.map((x) => x.toFixed(2)).join(', ')})`);
console.log(`writeSync baseline: ${median(b).toFixed(2)} µs per settlement (rounds ${b.map((x) => x.toFixed(2)).join(', ')})`);
console.log(`ratio: ${(median(a) / median(b)).toFixed(2)}×`);
