/**
 * Linux pressure-stall information (/proc/pressure): the share of wall time in which at least one task
 * was waiting for a CPU ("cpu some") or all non-idle tasks were stalled on I/O ("io full"). On a shared
 * machine this says how much of a latency tail is the scheduler's, not the process's. Null when the
 * kernel has no PSI.
 */
import { readFileSync } from 'node:fs';

export interface Pressure { cpuSome: number; ioFull: number }

const total = (file: string, line: 'some' | 'full') => {
  try {
    return Number(new RegExp(`^${line} .*total=(\\d+)`, 'm').exec(readFileSync(file, 'utf8'))?.[1] ?? NaN);
  } catch {
    return NaN;
  }
};

/** Starts a measurement; the returned function gives the shares (0..1) since then. */
export function pressureSince(): () => Pressure {
  const t0 = performance.now();
  const cpu0 = total('/proc/pressure/cpu', 'some');
  const io0 = total('/proc/pressure/io', 'full');
  return () => {
    const us = (performance.now() - t0) * 1000;
    return { cpuSome: (total('/proc/pressure/cpu', 'some') - cpu0) / us, ioFull: (total('/proc/pressure/io', 'full') - io0) / us };
  };
}
