/**
 * Counters of long-tasks-preload.ts, preloaded into a bench gateway when BENCH_LONG_TASKS names a file: what
 * runs on the gateway's main thread for long, and how late its event loop runs.
 * - Every timer and immediate callback (setTimeout, setInterval, setImmediate) is timed, wall clock and the
 *   thread's own CPU time (thread-cpu.ts: the wall clock alone also counts waiting for a CPU on a shared
 *   machine); those over 0.5 ms (either clock) are kept by label (the function's name or source).
 * - The settlement flush (QuotaService.flush: the SQLite batch transaction, journal rotation, waiters) is timed
 *   on its own, with its rows, wherever it is called from (its timer, or a full batch inside a request).
 * - A 1 ms timer measures the loop's lateness (a fixed-bucket histogram, so windows add up); each tick later
 *   than 0.5 ms is put down to an instrumented task that ran in it, else to the thread waiting for a CPU
 *   (/proc/self/task/<tid>/schedstat), else to other work: request handlers, socket callbacks, microtasks and
 *   garbage collection, which JavaScript cannot wrap (their pauses come from BUN_JSC_logGC, gc-log.ts).
 * - monitorEventLoopDelay (perf_hooks; Bun implements it) gives its own percentiles per window.
 * The gateway writes the file on SIGUSR2 (each write starts a new monitorEventLoopDelay window); the bench
 * diffs two reads.
 */
import { readFileSync } from 'node:fs';

/** Upper bounds (ms) of the histogram buckets; the last bucket is open. */
export const BOUNDS = [0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 20, 50, 100];

export interface TaskStat { n: number; cpuMs: number; wallMs: number; maxCpu: number; maxWall: number; cpuHist: number[]; wallHist: number[] }
export interface LongTaskCounters {
  /** Every timed task, by kind (timeout, interval, immediate). */
  kinds: Record<string, TaskStat>;
  /** Tasks over 0.5 ms (CPU or wall), by label. */
  long: Record<string, TaskStat>;
  /** The settlement flush, wherever called; rows: settlements written. */
  flush: TaskStat & { rows: number; maxRows: number };
  /** Loop lateness of a 1 ms timer. */
  lateHist: number[];
  ticks: number;
  /** Late ticks (> 0.5 ms) by cause: an instrumented task's label, 'waiting for a CPU', 'other work'. */
  lateBy: Record<string, { n: number; ms: number }>;
  /** monitorEventLoopDelay since the previous write, ms. */
  eld: { p50: number; p99: number; p999: number; max: number; n: number };
}

export const emptyStat = (): TaskStat => ({ n: 0, cpuMs: 0, wallMs: 0, maxCpu: 0, maxWall: 0, cpuHist: BOUNDS.map(() => 0).concat(0), wallHist: BOUNDS.map(() => 0).concat(0) });

export function bucket(ms: number): number {
  let i = 0;
  while (i < BOUNDS.length && ms > BOUNDS[i]!) i++;
  return i;
}

export function record(s: TaskStat, cpu: number, wall: number): void {
  s.n++;
  s.cpuMs += cpu;
  s.wallMs += wall;
  if (cpu > s.maxCpu) s.maxCpu = cpu;
  if (wall > s.maxWall) s.maxWall = wall;
  s.cpuHist[bucket(cpu)]!++;
  s.wallHist[bucket(wall)]!++;
}

export function readLongTasks(path: string): LongTaskCounters | null {
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch {
    return null;
  }
}

const sub = (a: number[], b: number[]) => b.map((x, i) => x - (a[i] ?? 0));
function diffStat(a: TaskStat | undefined, b: TaskStat): TaskStat {
  if (!a) return b;
  // Maxima are the later read's own (the instrument resets them at each write).
  return { n: b.n - a.n, cpuMs: b.cpuMs - a.cpuMs, wallMs: b.wallMs - a.wallMs, maxCpu: b.maxCpu, maxWall: b.maxWall, cpuHist: sub(a.cpuHist, b.cpuHist), wallHist: sub(a.wallHist, b.wallHist) };
}
function addStat(a: TaskStat | undefined, b: TaskStat): TaskStat {
  if (!a) return b;
  const add = (x: number[], y: number[]) => x.map((v, i) => v + (y[i] ?? 0));
  return { n: a.n + b.n, cpuMs: a.cpuMs + b.cpuMs, wallMs: a.wallMs + b.wallMs, maxCpu: Math.max(a.maxCpu, b.maxCpu), maxWall: Math.max(a.maxWall, b.maxWall), cpuHist: add(a.cpuHist, b.cpuHist), wallHist: add(a.wallHist, b.wallHist) };
}
function mapBoth<T>(a: Record<string, T>, b: Record<string, T>, f: (x: T | undefined, y: T) => T): Record<string, T> {
  const out: Record<string, T> = {};
  for (const k of Object.keys(b)) out[k] = f(a[k], b[k]!);
  return out;
}

/** The window between two reads (b later); eld and the maxima are b's own window. */
export function diffLongTasks(a: LongTaskCounters, b: LongTaskCounters): LongTaskCounters {
  return {
    kinds: mapBoth(a.kinds, b.kinds, diffStat),
    long: mapBoth(a.long, b.long, diffStat),
    flush: { ...diffStat(a.flush, b.flush), rows: b.flush.rows - a.flush.rows, maxRows: b.flush.maxRows },
    lateHist: sub(a.lateHist, b.lateHist),
    ticks: b.ticks - a.ticks,
    lateBy: mapBoth(a.lateBy, b.lateBy, (x, y) => ({ n: y.n - (x?.n ?? 0), ms: y.ms - (x?.ms ?? 0) })),
    eld: b.eld,
  };
}

/** Windows added up; eld quantiles averaged over the windows (as foldWindows does), their max the largest. */
export function addLongTasks(a: LongTaskCounters | undefined, b: LongTaskCounters, windows: number): LongTaskCounters {
  if (!a) return b;
  const w = (x: number, y: number) => (x * (windows - 1) + y) / windows;
  return {
    kinds: { ...a.kinds, ...mapBoth(a.kinds, b.kinds, addStat) },
    long: { ...a.long, ...mapBoth(a.long, b.long, addStat) },
    flush: { ...addStat(a.flush, b.flush), rows: a.flush.rows + b.flush.rows, maxRows: Math.max(a.flush.maxRows, b.flush.maxRows) },
    lateHist: a.lateHist.map((x, i) => x + (b.lateHist[i] ?? 0)),
    ticks: a.ticks + b.ticks,
    lateBy: { ...a.lateBy, ...mapBoth(a.lateBy, b.lateBy, (x, y) => ({ n: (x?.n ?? 0) + y.n, ms: (x?.ms ?? 0) + y.ms })) },
    eld: { p50: w(a.eld.p50, b.eld.p50), p99: w(a.eld.p99, b.eld.p99), p999: w(a.eld.p999, b.eld.p999), max: Math.max(a.eld.max, b.eld.max), n: a.eld.n + b.eld.n },
  };
}

/** The value at quantile q (0..1) of a bucket histogram: the bucket's upper bound (the open bucket: '>' its lower). */
export function histQuantile(h: number[], q: number): string {
  const total = h.reduce((s, x) => s + x, 0);
  if (!total) return '-';
  let acc = 0;
  for (let i = 0; i < h.length; i++) {
    acc += h[i]!;
    if (acc >= q * total) return i < BOUNDS.length ? `≤${BOUNDS[i]}` : `>${BOUNDS[BOUNDS.length - 1]}`;
  }
  return '-';
}

/** How many of a histogram's entries are above `ms` (a bucket bound). */
export function over(h: number[], ms: number): number {
  const i = BOUNDS.indexOf(ms);
  return h.slice(i + 1).reduce((s, x) => s + x, 0);
}

/** Human-readable lines for a run's long-task counters over `seconds`. */
export function describeLongTasks(c: LongTaskCounters, seconds: number): string[] {
  const f = (x: number, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : '-');
  const per = (n: number) => f(n / seconds, 1);
  const lines: string[] = [];
  const late = Object.values(c.lateBy).reduce((s, x) => s + x.n, 0);
  lines.push(`loop (1 ms timer, ${c.ticks} ticks): lateness p50 ${histQuantile(c.lateHist, 0.5)} p99 ${histQuantile(c.lateHist, 0.99)} p99.9 ${histQuantile(c.lateHist, 0.999)} ms; > 0.5 / 1 / 2 / 5 ms: ${per(over(c.lateHist, 0.5))} / ${per(over(c.lateHist, 1))} / ${per(over(c.lateHist, 2))} / ${per(over(c.lateHist, 5))} per s`);
  lines.push(`monitorEventLoopDelay (mean of windows): p50 ${f(c.eld.p50)} p99 ${f(c.eld.p99)} p99.9 ${f(c.eld.p999)} max ${f(c.eld.max, 1)} ms`);
  lines.push(`late ticks (> 0.5 ms) by cause: ${Object.entries(c.lateBy).sort((a, b) => b[1].n - a[1].n).map(([k, v]) => `${k} ${f((100 * v.n) / Math.max(1, late), 0)}% (${per(v.n)}/s, ${f(v.ms, 0)} ms)`).join('; ')}`);
  const s = (x: TaskStat) => `n ${x.n} (${per(x.n)}/s), CPU mean ${f(x.cpuMs / Math.max(1, x.n), 3)} p99 ${histQuantile(x.cpuHist, 0.99)} max ${f(x.maxCpu)} ms, wall mean ${f(x.wallMs / Math.max(1, x.n), 3)} p99 ${histQuantile(x.wallHist, 0.99)} max ${f(x.maxWall)} ms; CPU > 0.5 / 1 / 2 ms: ${over(x.cpuHist, 0.5)} / ${over(x.cpuHist, 1)} / ${over(x.cpuHist, 2)}, wall > 0.5 / 1 / 2 ms: ${over(x.wallHist, 0.5)} / ${over(x.wallHist, 1)} / ${over(x.wallHist, 2)}`;
  lines.push(`settlement flush: ${s(c.flush)}; rows ${f(c.flush.rows / Math.max(1, c.flush.n), 1)} per batch (max ${c.flush.maxRows}), CPU ${f((1000 * c.flush.cpuMs) / Math.max(1, c.flush.rows), 1)} µs per row`);
  for (const [k, v] of Object.entries(c.kinds)) lines.push(`${k} callbacks: ${s(v)}`);
  const longs = Object.entries(c.long).sort((a, b) => b[1].n - a[1].n);
  for (const [k, v] of longs.slice(0, 8)) lines.push(`  long: ${k}: ${s(v)}`);
  return lines;
}
