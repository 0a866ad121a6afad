/**
 * `bun run bench:tail`: added tail latency at one connection (p50/p99/p99.9, JSON and time to the first SSE
 * event) of the gateway over the upstream double, next to the bare-proxy floor, with CPU per request and the
 * event-loop delay of the gateway (its own LOOP_DELAY_SAMPLE_MS metric) and of an idle probe process (what
 * the machine's scheduling alone costs any process).
 *
 * Each target gets BENCH_SECONDS (default 30) per kind, run in BENCH_SLICE_SECONDS (default 5) slices taken
 * round-robin over the targets, so a change in the machine's load hits every target alike.
 * BENCH_GATEWAYS: comma-separated source trees whose bench/gateway-proc.ts to start (default: this one), e.g.
 * a checkout of the previous commit, to compare before and after in one run. BENCH_LOOP_DELAY_MS (default 1)
 * is the loop-delay sampling period, BENCH_CONCURRENCY (default 1) the connections, BENCH_OUT a file for
 * the results as JSON. BENCH_LOOP_GAPS=1 also splits each gateway's loop lateness into time its thread ran
 * (work on the loop) and time it waited for a CPU (lib/loop-gaps-preload.ts; costs the gateway 2-3% of a core).
 * BENCH_LONG_TASKS=1 instead times what runs on each gateway's main thread (lib/long-tasks-preload.ts: every
 * timer and immediate callback and the settlement flush, thread CPU and wall; loop lateness and
 * monitorEventLoopDelay; late ticks by cause) and logs its garbage collections (BUN_JSC_logGC, lib/gc-log.ts).
 * BENCH_GATEWAY_ENVS: a JSON array of extra process environments, one per gateway (e.g. the same tree twice,
 * the second with a BUN_JSC_ runtime option), to compare runtime settings interleaved in one run.
 */
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { load, quantiles, type Quantiles, type Samples, type Target } from './lib/latency';
import { LoopProbe, foldWindows, scrapeGatewayLoop, type LoopWindow } from './lib/loop-delay';
import { cpuSeconds, ownPackages, spawnJson } from './lib/procs';
import { pressureSince, type Pressure } from './lib/pressure';
import { addGaps, diffGaps, readGaps, type GapCounters } from './lib/loop-gaps';
import { tmpdir } from 'node:os';
import { addLongTasks, describeLongTasks, diffLongTasks, readLongTasks, type LongTaskCounters } from './lib/long-tasks';
import { gcLogOffset, readGcPauses, type GcPauses } from './lib/gc-log';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 30);
const SLICE = Math.min(SECONDS, Number(process.env.BENCH_SLICE_SECONDS ?? 5));
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 1);
const LOOP_MS = Number(process.env.BENCH_LOOP_DELAY_MS ?? 1);
const HERE = resolve(`${import.meta.dir}/..`);
const TREES = (process.env.BENCH_GATEWAYS ?? HERE).split(',').map((t) => ownPackages(resolve(t.trim())));
const TREE_ENVS: Array<Record<string, string>> = process.env.BENCH_GATEWAY_ENVS ? JSON.parse(process.env.BENCH_GATEWAY_ENVS) : [];

interface Run { name: string; target: Target; pid: number; admin?: string; samples: Samples; cpu: number; gwLoop: LoopWindow[]; probeLoop: LoopWindow[]; seconds: number; pressure: Pressure[]; gapsFile?: string; gaps?: GapCounters; tasksFile?: string; gcFile?: string; tasks?: LongTaskCounters; gc?: GcPauses }

const upstream = await spawnJson(['bench/upstream-proc.ts'], HERE);
const bare = await spawnJson(['bench/bare-proxy-proc.ts', upstream.info.url], HERE);
const gwEnv = JSON.stringify({ ...(process.env.BENCH_GW_ENV ? JSON.parse(process.env.BENCH_GW_ENV) : {}), LOOP_DELAY_SAMPLE_MS: String(LOOP_MS) });
const GAPS = process.env.BENCH_LOOP_GAPS === '1';
const TASKS = process.env.BENCH_LONG_TASKS === '1';
const gapFiles = TREES.map((_, i) => `${tmpdir()}/bench-loop-gaps-${process.pid}-${i}.json`);
const taskFiles = TREES.map((_, i) => `${tmpdir()}/bench-long-tasks-${process.pid}-${i}.json`);
const gcFiles = TREES.map((_, i) => `${tmpdir()}/bench-gc-${process.pid}-${i}.log`);
const gateways = await Promise.all(TREES.map((tree, i) => spawnJson([
  ...(GAPS ? ['--preload', `${HERE}/bench/lib/loop-gaps-preload.ts`] : []),
  ...(TASKS ? ['--preload', `${HERE}/bench/lib/long-tasks-preload.ts`] : []),
  'bench/gateway-proc.ts', upstream.info.url], tree,
{ BENCH_GW_ENV: gwEnv, BENCH_LOOP_GAPS: GAPS ? gapFiles[i]! : '', BENCH_LONG_TASKS: TASKS ? taskFiles[i]! : '', ...(TASKS ? { BUN_JSC_logGC: '1' } : {}), ...TREE_ENVS[i] },
TASKS ? gcFiles[i] : undefined)));
/** Asks a gateway's long-task instrument for its counters (it writes them on SIGUSR2). */
const snapshot = async (r: Run) => {
  process.kill(r.pid, 'SIGUSR2');
  await Bun.sleep(30);
  return readLongTasks(r.tasksFile!);
};
const probe = await LoopProbe.start(LOOP_MS);
const f = (x: number, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : '-');

try {
  const upstreamHeaders = { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', 'x-api-key': 'bench-upstream-key' };
  const targets: Array<Omit<Run, 'samples' | 'cpu' | 'gwLoop' | 'probeLoop' | 'seconds' | 'pressure' | 'gaps'>> = [
    { name: 'direct', target: { url: upstream.info.url, headers: upstreamHeaders }, pid: upstream.proc.pid },
    { name: 'bare proxy', target: { url: bare.info.url, headers: upstreamHeaders }, pid: bare.proc.pid },
    ...gateways.map((g, i) => ({
      name: TREES.length > 1 ? `gateway ${i + 1}` : 'gateway', pid: g.proc.pid, admin: g.info.admin as string, gapsFile: GAPS ? gapFiles[i] : undefined, tasksFile: TASKS ? taskFiles[i] : undefined, gcFile: TASKS ? gcFiles[i] : undefined,
      target: { url: g.info.url, headers: { 'content-type': 'application/json', 'vendor-version': '2023-06-01', 'x-api-key': g.info.key } },
    })),
  ];
  const results: Record<string, Run[]> = {};
  for (const [kind, stream] of [['json', false], ['sse', true]] as const) {
    // Warm-up: JIT, connection pools, SQLite page cache.
    for (const t of targets) await load(t.target, stream, CONCURRENCY, 1);
    const runs: Run[] = targets.map((t) => ({ ...t, samples: { lat: [], ttft: [], errors: 0 }, cpu: 0, gwLoop: [], probeLoop: [], seconds: 0, pressure: [] }));
    for (let done = 0; done < SECONDS - 1e-9; done += SLICE) {
      for (const r of runs) {
        await probe.window();
        if (r.admin) await scrapeGatewayLoop(r.target.url, r.admin);
        const c0 = cpuSeconds(r.pid);
        const t0 = performance.now();
        const psi = pressureSince();
        const g0 = r.gapsFile ? readGaps(r.gapsFile) : null;
        const l0 = r.tasksFile ? await snapshot(r) : null;
        const gc0 = r.gcFile ? gcLogOffset(r.gcFile) : 0;
        await load(r.target, stream, CONCURRENCY, SLICE, r.samples);
        r.pressure.push(psi());
        if (g0) {
          await Bun.sleep(150); // the counters are written every 100 ms
          const d = diffGaps(g0, readGaps(r.gapsFile!));
          r.gaps = r.gaps ? addGaps(r.gaps, d) : d;
        }
        if (l0) {
          const l1 = await snapshot(r);
          if (l1) r.tasks = addLongTasks(r.tasks, diffLongTasks(l0, l1), r.pressure.length);
          const gc = readGcPauses(r.gcFile!, gc0);
          r.gc = r.gc ? { eden: r.gc.eden.concat(gc.eden), full: r.gc.full.concat(gc.full) } : gc;
        }
        r.seconds += (performance.now() - t0) / 1000;
        r.cpu += cpuSeconds(r.pid) - c0;
        r.probeLoop.push(await probe.window());
        if (r.admin) r.gwLoop.push(await scrapeGatewayLoop(r.target.url, r.admin));
      }
    }
    results[kind] = runs;
  }

  console.log(`\nTail latency at ${CONCURRENCY} connection(s), ${SECONDS} s per target in ${SLICE} s slices (${new Date().toISOString()}, ${navigator.hardwareConcurrency} cores, Bun ${Bun.version})`);
  TREES.forEach((t, i) => console.log(`  gateway ${TREES.length > 1 ? i + 1 : ''} = ${t}${TREE_ENVS[i] && Object.keys(TREE_ENVS[i]!).length ? ` with ${JSON.stringify(TREE_ENVS[i])}` : ''}`));
  console.log(`  loop delay sampled every ${LOOP_MS} ms; "probe" = an idle process on the same machine (the scheduling floor);`);
  console.log('  cpu / io stall = share of the time some task waited for a CPU / every task waited on I/O (/proc/pressure)\n');
  const out: Record<string, unknown[]> = {};
  for (const [kind, runs] of Object.entries(results)) {
    const what = kind === 'sse' ? 'time to first SSE event' : 'JSON response';
    console.log(`${`${kind.toUpperCase()}: ${what}, ms`.padEnd(28)} |   req/s |   p50 |   p99 | p99.9 |    max |      n | err | added p50 / p99 / p99.9 | CPU µs/req | loop p50 / p99 / p99.9 / max | probe p99 / max | cpu / io stall`);
    const q = runs.map((r) => quantiles(kind === 'sse' ? r.samples.ttft : r.samples.lat));
    const direct = q[0]!;
    out[kind] = runs.map((r, i) => {
      const x: Quantiles = q[i]!;
      const rps = x.n / r.seconds;
      const cpuUs = (r.cpu * 1e6) / Math.max(1, x.n + r.samples.errors);
      const loop = r.gwLoop.length ? foldWindows(r.gwLoop) : null;
      const pr = foldWindows(r.probeLoop);
      const stall = (k: keyof Pressure) => r.pressure.reduce((a, p) => a + p[k], 0) / r.pressure.length;
      const added = i === 0 ? '' : `${f(x.p50 - direct.p50)} / ${f(x.p99 - direct.p99)} / ${f(x.p999 - direct.p999)}`;
      const loopText = loop ? `${f(loop.p50)} / ${f(loop.p99)} / ${f(loop.p999)} / ${f(loop.max, 1)}` : '';
      console.log(`${r.name.padEnd(28)} | ${f(rps, 0).padStart(7)} | ${f(x.p50).padStart(5)} | ${f(x.p99).padStart(5)} | ${f(x.p999).padStart(5)} | ${f(x.max, 1).padStart(6)} | ${String(x.n).padStart(6)} | ${String(r.samples.errors).padStart(3)} | ${added.padStart(23)} | ${f(cpuUs, 0).padStart(10)} | ${loopText.padStart(28)} | ${f(pr.p99)} / ${f(pr.max, 1)} | ${f(stall('cpuSome') * 100, 0)}% / ${f(stall('ioFull') * 100, 1)}%`);
      return { name: r.name, rps, ...x, errors: r.samples.errors, addedP50: x.p50 - direct.p50, addedP99: x.p99 - direct.p99, addedP999: x.p999 - direct.p999, cpuUs, loop, probe: pr, cpuStall: stall('cpuSome'), ioStall: stall('ioFull'), gaps: r.gaps ?? null, tasks: r.tasks ?? null, gc: r.gc ? gcSummary(r.gc, r.seconds) : null };
    });
    for (const r of runs) {
      const g = r.gaps;
      if (!g) continue;
      const per = (n: number) => f(n / r.seconds, 0);
      console.log(`  ${r.name}: loop late > 0.5 ms ${per(g.late)}/s; thread running in ${f((100 * g.busy) / Math.max(1, g.late), 0)}% of them (> 1/2/5 ms: ${per(g.busyOver1)}/${per(g.busyOver2)}/${per(g.busyOver5)} per s), waiting for a CPU in the rest (> 1/2/5 ms: ${per(g.waitOver1)}/${per(g.waitOver2)}/${per(g.waitOver5)} per s); lateness ${f(g.runMs, 0)} ms running vs ${f(g.waitMs, 0)} ms waiting`);
    }
    for (const r of runs) {
      if (!r.tasks) continue;
      console.log(`  ${r.name}, main thread:`);
      for (const l of describeLongTasks(r.tasks, r.seconds)) console.log(`    ${l}`);
      const g = gcSummary(r.gc ?? { eden: [], full: [] }, r.seconds);
      console.log(`    GC pauses (BUN_JSC_logGC): eden ${f(g.edenPerS, 1)}/s p50 ${f(g.edenP50)} p99 ${f(g.edenP99)} max ${f(g.edenMax)} ms; full ${f(g.fullPerS, 2)}/s p50 ${f(g.fullP50)} max ${f(g.fullMax)} ms; > 0.5 / 1 / 2 ms: ${f(g.over05PerS, 1)} / ${f(g.over1PerS, 1)} / ${f(g.over2PerS, 1)} per s`);
    }
    const bareRps = (out[kind]![1] as { rps: number }).rps;
    const directRps = (out[kind]![0] as { rps: number }).rps;
    for (const r of out[kind]!.slice(2) as Array<{ name: string; rps: number }>) {
      console.log(`  ${r.name}: ${f(r.rps / directRps)}x of direct, ${f(r.rps / bareRps)}x of the bare proxy (bare: ${f(bareRps / directRps)}x of direct)`);
    }
    console.log('');
  }
  if (process.env.BENCH_OUT) writeFileSync(process.env.BENCH_OUT, JSON.stringify({ at: new Date().toISOString(), seconds: SECONDS, concurrency: CONCURRENCY, trees: TREES, results: out }, null, 2));
} finally {
  probe.stop();
  if (TASKS) console.log(`GC logs: ${gcFiles.join(', ')}`);
  for (const p of [upstream, bare, ...gateways]) p.proc.kill('SIGTERM');
  await Promise.all([upstream, bare, ...gateways].map((p) => p.proc.exited));
}

function gcSummary(g: GcPauses, seconds: number) {
  const q = (xs: number[], p: number) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))]! : NaN);
  const all = g.eden.concat(g.full);
  const over = (ms: number) => all.filter((x) => x > ms).length / seconds;
  return { edenPerS: g.eden.length / seconds, edenP50: q(g.eden, 0.5), edenP99: q(g.eden, 0.99), edenMax: q(g.eden, 1), fullPerS: g.full.length / seconds, fullP50: q(g.full, 0.5), fullMax: q(g.full, 1), over05PerS: over(0.5), over1PerS: over(1), over2PerS: over(2) };
}
