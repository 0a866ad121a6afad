/**
 * `bun run bench/alloc.ts [<other-checkout> ...]`: JS heap bytes allocated per /v1/messages request by the gateway's
 * main thread (what feeds its eden collections), for native JSON and native SSE (BENCH_STREAM_EVENTS, default 26)
 * and, with BENCH_UPSTREAM=openai BENCH_CHANNEL='{"type":"openai"}', translated ones. The gateway runs with
 * BUN_JSC_logGC=1 and bench/gc-on-signal.ts: a full collection before and after BENCH_REQUESTS (20,000) requests at
 * BENCH_CONCURRENCY (4); JSC logs each collection's heap size at its start and end, so the bytes allocated between
 * them are the sum over the window of (size at a collection's start − size at the previous one's end). Allocation
 * varies by a few KB between passes (how JSC accounts its blocks), so targets are measured in BENCH_ROUNDS (3) interleaved
 * rounds and the table shows medians and ranges.
 */
if (!process.env.BUN_CONFIG_MAX_HTTP_REQUESTS) {
  const child = Bun.spawn([process.execPath, ...process.argv.slice(1)], { env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: '8192' }, stdio: ['inherit', 'inherit', 'inherit'] });
  process.exit(await child.exited);
}
import { readFileSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { ownPackages, spawnJson } from './lib/procs';

const N = Number(process.env.BENCH_REQUESTS ?? 20_000);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 4);
const here = resolve(import.meta.dir, '..');
const dirs = [here, ...process.argv.slice(2).map((d) => ownPackages(resolve(d)))];

/**
 * BENCH_ALLOC_PHASES (json,sse): besides the answered requests, ones refused at a stage, to split the cost by
 * stage: `401` (unknown key: front door only), `400` (bad body: key, parse, validation), `404` (unknown model:
 * through routing and the quota hold), `health` (GET /health: the framework's floor).
 */
const PHASES = (process.env.BENCH_ALLOC_PHASES ?? 'json,sse').split(',').map((x) => x.trim());
async function drive(url: string, key: string, phase: string, n: number) {
  const stream = phase === 'sse';
  const model = phase === '404' ? 'no-such-model' : 'bench-model';
  const body = phase === '400' ? JSON.stringify({ model, max_tokens: 'x', messages: [] }) : JSON.stringify({ model, max_tokens: 64, stream, messages: [{ role: 'user', content: 'Say hello.' }] });
  const headers = { 'content-type': 'application/json', 'vendor-version': '2023-06-01', 'x-api-key': phase === '401' ? 'sk-not-a-key' : key };
  const expect = /^\d+$/.test(phase) ? Number(phase) : 200;
  let left = n;
  let errors = 0;
  const worker = async () => {
    while (left-- > 0) {
      const res = phase === 'health' ? await fetch(`${url}/health`) : await fetch(`${url}/v1/messages`, { method: 'POST', headers, body });
      await res.arrayBuffer();
      if (res.status !== expect) errors++;
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  if (errors) console.error(`${errors} errors`);
}

interface Gc { heap: string; startKb: number; endKb: number; at: number }
function gcs(log: string): Gc[] {
  const out: Gc[] = [];
  for (const m of log.matchAll(/GC<(0x[0-9a-f]+)>: START \S+ (\d+)kb => \w+Collection.*? => (\d+)kb, p=/g)) {
    out.push({ heap: m[1]!, startKb: Number(m[2]), endKb: Number(m[3]), at: m.index! });
  }
  return out;
}

/** Sends SIGUSR2 (a full collection) and waits until the log shows one more collection of any heap. */
async function fullGc(proc: { pid: number }, logFile: string): Promise<number> {
  const before = gcs(readFileSync(logFile, 'utf8')).length;
  process.kill(proc.pid, 'SIGUSR2');
  for (let i = 0; i < 200; i++) {
    await Bun.sleep(25);
    if (gcs(readFileSync(logFile, 'utf8')).length > before) break;
  }
  await Bun.sleep(50);
  return statSync(logFile).size;
}

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const upstream = await spawnJson(['bench/upstream-proc.ts'], here, { BENCH_STREAM_EVENTS: process.env.BENCH_STREAM_EVENTS ?? '26' });
// BENCH_ALLOC_BARE=1: the bare proxy (bench/bare-proxy-proc.ts) instead, the floor any proxy allocates.
const proc = process.env.BENCH_ALLOC_BARE === '1' ? 'bench/bare-proxy-proc.ts' : 'bench/gateway-proc.ts';
const logFiles = dirs.map((_, i) => `/tmp/gw-alloc-${process.pid}-${i}.log`);
const gateways = await Promise.all(dirs.map((dir, i) => spawnJson(['--preload', './bench/gc-on-signal.ts', proc, upstream.info.url], dir, { BUN_JSC_logGC: '1' }, logFiles[i])));
/** KB per request and eden collections per second, by target and phase, one entry per round. */
const kbs: number[][][] = dirs.map(() => PHASES.map(() => []));
const rates: number[][][] = dirs.map(() => PHASES.map(() => []));

async function measure(i: number, phase: string): Promise<void> {
  const gw = gateways[i]!;
  const logFile = logFiles[i]!;
  await drive(gw.info.url, gw.info.key, phase, 2_000);
  const from = await fullGc(gw.proc, logFile);
  const t0 = performance.now();
  await drive(gw.info.url, gw.info.key, phase, N);
  const secs = (performance.now() - t0) / 1000;
  await fullGc(gw.proc, logFile);
  const all = gcs(readFileSync(logFile, 'utf8'));
  const sizes = new Map<string, number>();
  for (const g of all) sizes.set(g.heap, Math.max(sizes.get(g.heap) ?? 0, g.startKb));
  const main = [...sizes].sort((a, b) => b[1] - a[1])[0]![0];
  const mine = all.filter((g) => g.heap === main);
  const first = mine.findIndex((g) => g.at >= from);
  let kb = 0;
  let eden = 0;
  for (let k = Math.max(1, first); k < mine.length; k++) {
    kb += Math.max(0, mine[k]!.startKb - mine[k - 1]!.endKb);
    if (k < mine.length - 1) eden++;
  }
  kbs[i]![PHASES.indexOf(phase)]!.push(kb / N);
  rates[i]![PHASES.indexOf(phase)]!.push(eden / secs);
  console.error(`${dirs[i]} ${phase}: ${(kb / N).toFixed(2)} KB per request, ${eden} collections in ${secs.toFixed(1)} s`);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
try {
  for (let round = 0; round < ROUNDS; round++) {
    const order = dirs.map((_, i) => i);
    if (round % 2) order.reverse();
    for (const phase of PHASES) for (const i of order) await measure(i, phase);
  }
} finally {
  for (const g of gateways) g.proc.kill('SIGTERM');
  await Promise.all(gateways.map((g) => g.proc.exited));
  upstream.proc.kill('SIGTERM');
}
console.log(`\nJS heap allocated per request, KB: median (range) of ${ROUNDS} interleaved rounds of ${N} requests at ${CONCURRENCY} connections; eden collections per second (BUN_JSC_logGC; ${new Date().toISOString()})\n`);
console.log(`| checkout | ${PHASES.join(' | ')} |`);
console.log(`| --- |${PHASES.map(() => ' --- |').join('')}`);
for (const [i, dir] of dirs.entries()) {
  const cells = PHASES.map((_, p) => {
    const xs = kbs[i]![p]!;
    return `${median(xs).toFixed(1)} (${Math.min(...xs).toFixed(1)}–${Math.max(...xs).toFixed(1)}), ${median(rates[i]![p]!).toFixed(1)} GC/s`;
  });
  console.log(`| ${dir} | ${cells.join(' | ')} |`);
}
