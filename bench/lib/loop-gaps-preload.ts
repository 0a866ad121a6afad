/**
 * The sampler of loop-gaps.ts, preloaded into a bench gateway (`bun --preload`): runs only when
 * BENCH_LOOP_GAPS names the file to write its counters to. Kept apart from the helpers so that importing
 * them (bench/tail.ts) never starts a sampler.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import type { GapCounters } from './loop-gaps';

const file = process.env.BENCH_LOOP_GAPS;
if (file) {
  const schedFile = `/proc/self/task/${process.pid}/schedstat`;
  const sched = () => {
    const [run, wait] = readFileSync(schedFile, 'utf8').split(' ').map(Number);
    return { run: run! / 1e6, wait: wait! / 1e6 };
  };
  const c: GapCounters = { late: 0, busy: 0, lateMs: 0, runMs: 0, waitMs: 0, busyOver1: 0, busyOver2: 0, busyOver5: 0, waitOver1: 0, waitOver2: 0, waitOver5: 0 };
  let last = performance.now();
  let s0 = sched();
  setInterval(() => {
    const now = performance.now();
    const s = sched();
    const late = now - last - 1;
    if (late > 0.5) {
      const run = s.run - s0.run;
      const wait = s.wait - s0.wait;
      const busy = run > wait;
      c.late++;
      c.lateMs += late;
      c.runMs += run;
      c.waitMs += wait;
      if (busy) c.busy++;
      if (late > 1) busy ? c.busyOver1++ : c.waitOver1++;
      if (late > 2) busy ? c.busyOver2++ : c.waitOver2++;
      if (late > 5) busy ? c.busyOver5++ : c.waitOver5++;
    }
    last = now;
    s0 = s;
  }, 1).unref();
  setInterval(() => writeFileSync(file, JSON.stringify(c)), 100).unref();
}

