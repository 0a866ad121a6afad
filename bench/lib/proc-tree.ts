/**
 * CPU time of a process together with everything it started (a WORKERS=N supervisor and its workers),
 * and of PostgreSQL backends by application_name: a mode's cost per request includes the processes that
 * serve it, not only the one the bench spawned.
 */
import { readdirSync, readFileSync } from 'node:fs';

interface Stat { ppid: number; cpu: number }

const CLOCK_TICKS = 100;

function stat(pid: number): Stat | null {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return { ppid: Number(f[1]), cpu: (Number(f[11]) + Number(f[12])) / CLOCK_TICKS };
  } catch {
    return null; // gone, or not ours to read
  }
}

/** `root` and all its descendants (one scan of /proc). */
export function descendants(root: number): number[] {
  const parent = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    const pid = Number(name);
    if (!Number.isInteger(pid)) continue;
    const s = stat(pid);
    if (s) parent.set(pid, s.ppid);
  }
  const out = [root];
  for (let i = 0; i < out.length; i++) for (const [pid, pp] of parent) if (pp === out[i]) out.push(pid);
  return out;
}

/** CPU seconds (user + system) used so far by each of `pids` (missing ones are left out). */
export function cpuOf(pids: number[]): Map<number, number> {
  const m = new Map<number, number>();
  for (const pid of pids) {
    const s = stat(pid);
    if (s) m.set(pid, s.cpu);
  }
  return m;
}

/**
 * CPU seconds spent between two snapshots. A process that appeared in between counts from zero (it was
 * born in the interval); one that vanished is lost, which only a crash would cause here.
 */
export function cpuBetween(before: Map<number, number>, after: Map<number, number>): number {
  let s = 0;
  for (const [pid, cpu] of after) s += cpu - (before.get(pid) ?? 0);
  return s;
}
