/**
 * The instrument of long-tasks.ts, preloaded into a bench gateway (`bun --preload`): runs only when
 * BENCH_LONG_TASKS names the file to write its counters to. It patches the gateway's own tree (the working
 * directory), so one bench can instrument several checkouts. It costs the gateway work (a 1 ms timer with a /proc
 * read per tick, as loop-gaps-preload.ts's 2-3% of a core, and two clock reads per timer callback; JSC's GC log):
 * compare trees with it on in both, and read CPU per request from runs without it.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { threadCpuMs } from './thread-cpu';
import { bucket, emptyStat, record, type LongTaskCounters } from './long-tasks';

const file = process.env.BENCH_LONG_TASKS;
if (file) {
  const c: LongTaskCounters = { kinds: {}, long: {}, flush: { ...emptyStat(), rows: 0, maxRows: 0 }, lateHist: emptyStat().cpuHist, ticks: 0, lateBy: {}, eld: { p50: NaN, p99: NaN, p999: NaN, max: NaN, n: 0 } };
  const LONG = 0.5;
  // The instrumented task that took the most wall time since the loop timer last ran, to blame a late tick on.
  let since = { label: '', wall: 0 };
  const label = (fn: Function) => fn.name || String(fn).replace(/\s+/g, ' ').slice(0, 70);
  const timed = (kind: string, fn: Function, self: unknown, args: unknown[]) => {
    const c0 = threadCpuMs();
    const w0 = performance.now();
    try {
      return fn.apply(self, args);
    } finally {
      const wall = performance.now() - w0;
      const cpu = threadCpuMs() - c0;
      record((c.kinds[kind] ??= emptyStat()), cpu, wall);
      if (cpu > LONG || wall > LONG) {
        const l = `${kind} ${label(fn)}`;
        record((c.long[l] ??= emptyStat()), cpu, wall);
        if (wall > since.wall) since = { label: l, wall };
      }
    }
  };
  const orig = { setTimeout: globalThis.setTimeout, setInterval: globalThis.setInterval, setImmediate: globalThis.setImmediate };
  const wrap = (kind: keyof typeof orig) => function (this: unknown, fn: unknown, ...rest: unknown[]) {
    if (typeof fn !== 'function') return (orig[kind] as Function).call(this, fn, ...rest);
    const cb = function (this: unknown, ...args: unknown[]) { return timed(kind, fn, this, args); };
    return (orig[kind] as Function).call(this, cb, ...rest);
  };
  for (const k of Object.keys(orig) as Array<keyof typeof orig>) Object.assign(globalThis, { [k]: Object.assign(wrap(k), orig[k]) });

  // The settlement flush of the gateway's own tree (the cwd), however it is reached.
  const { QuotaService } = await import(`${process.cwd()}/libs/billing/src/quota.ts`);
  const flush = QuotaService.prototype.flush;
  QuotaService.prototype.flush = function (this: { queue: unknown[] }) {
    const rows = this.queue.length;
    if (!rows) return flush.call(this);
    const c0 = threadCpuMs();
    const w0 = performance.now();
    try {
      return flush.call(this);
    } finally {
      const wall = performance.now() - w0;
      record(c.flush, threadCpuMs() - c0, wall);
      c.flush.rows += rows;
      if (rows > c.flush.maxRows) c.flush.maxRows = rows;
      if (wall > LONG && wall > since.wall) since = { label: 'settlement flush', wall };
    }
  };

  const schedFile = `/proc/self/task/${process.pid}/schedstat`;
  const sched = () => {
    const [run, wait] = readFileSync(schedFile, 'utf8').split(' ').map(Number);
    return { run: run! / 1e6, wait: wait! / 1e6 };
  };
  let last = performance.now();
  let s0 = sched();
  orig.setInterval(() => {
    const now = performance.now();
    const s = sched();
    const late = Math.max(0, now - last - 1);
    c.ticks++;
    c.lateHist[bucket(late)]!++;
    if (late > LONG) {
      const run = s.run - s0.run;
      const wait = s.wait - s0.wait;
      const cause = since.wall >= late / 2 ? since.label : wait > run ? 'waiting for a CPU' : 'other work (handlers, I/O, microtasks, GC)';
      const b = (c.lateBy[cause] ??= { n: 0, ms: 0 });
      b.n++;
      b.ms += late;
    }
    since = { label: '', wall: 0 };
    last = now;
    s0 = s;
  }, 1).unref();

  const eld = monitorEventLoopDelay({ resolution: 1 });
  eld.enable();
  const write = () => {
    const ms = (ns: number) => ns / 1e6;
    c.eld = { p50: ms(eld.percentile(50)), p99: ms(eld.percentile(99)), p999: ms(eld.percentile(99.9)), max: ms(eld.max), n: eld.count };
    eld.reset();
    writeFileSync(file, JSON.stringify(c));
    // Maxima are per window (since the previous write): counts and sums add up across windows, maxima do not.
    for (const t of [c.flush, ...Object.values(c.kinds), ...Object.values(c.long)]) t.maxCpu = t.maxWall = 0;
    c.flush.maxRows = 0;
  };
  process.on('SIGUSR2', write);
  write();
}
