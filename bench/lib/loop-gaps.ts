/**
 * Counters of loop-gaps-preload.ts, which is preloaded into a bench gateway when BENCH_LOOP_GAPS names a
 * file: it splits the event loop's lateness into
 * work and waiting. A 1 ms timer measures how late it fires; for each tick later than 0.5 ms the main
 * thread's own scheduler counters (/proc/self/task/<tid>/schedstat: time on a CPU, time runnable but
 * waiting for one) say whether the loop was busy running something or the thread was descheduled by an
 * oversubscribed machine. Cumulative counters are written to the file every 100 ms; diff two reads.
 * Diagnostic only: the timer and the /proc reads cost about 2-3% of a core.
 */
import { readFileSync } from 'node:fs';

export interface GapCounters {
  /** Ticks later than 0.5 ms, and those in which the thread ran more than it waited. */
  late: number;
  busy: number;
  /** Milliseconds of lateness, and of running and runqueue waiting during the late ticks. */
  lateMs: number;
  runMs: number;
  waitMs: number;
  /** Late ticks by how late: > 1, > 2, > 5 ms, split busy / waiting. */
  busyOver1: number; busyOver2: number; busyOver5: number;
  waitOver1: number; waitOver2: number; waitOver5: number;
}

/** Reads a gateway's counters (zeros before its first write). */
export function readGaps(path: string): GapCounters {
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch {
    return { late: 0, busy: 0, lateMs: 0, runMs: 0, waitMs: 0, busyOver1: 0, busyOver2: 0, busyOver5: 0, waitOver1: 0, waitOver2: 0, waitOver5: 0 };
  }
}

export function diffGaps(a: GapCounters, b: GapCounters): GapCounters {
  const out = { ...b };
  for (const k of Object.keys(b) as Array<keyof GapCounters>) out[k] = b[k] - a[k];
  return out;
}

export function addGaps(a: GapCounters, b: GapCounters): GapCounters {
  const out = { ...a };
  for (const k of Object.keys(a) as Array<keyof GapCounters>) out[k] = a[k] + b[k];
  return out;
}
