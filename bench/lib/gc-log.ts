/**
 * Garbage-collection pauses of a bench gateway started with BUN_JSC_logGC=1 and its stderr in a file: JSC
 * prints one line per collection, with its kind (Eden or Full) and its pause ("p=0.736241ms"). The pauses are
 * on the collecting thread (the concurrent marking is not), so they are loop delay that no JavaScript wrapper sees.
 * Every VM logs to the same stderr (the gateway's workers have their own heaps, of a few hundred KB): lines are
 * told apart by the heap's address ("GC<0x…>"), and the main thread's heap is the largest one seen.
 */
import { openSync, readSync, fstatSync, closeSync } from 'node:fs';

export interface GcPauses { eden: number[]; full: number[] }

/** The file's size now: pass it to readGcPauses to read only what was logged after. */
export function gcLogOffset(path: string): number {
  const fd = openSync(path, 'r');
  try { return fstatSync(fd).size; } finally { closeSync(fd); }
}

/** The main heap's pauses (ms) logged in `path` from byte `from` on. */
export function readGcPauses(path: string, from: number): GcPauses {
  const fd = openSync(path, 'r');
  try {
    const size = fstatSync(fd).size;
    const buf = Buffer.alloc(Math.max(0, size - from));
    readSync(fd, buf, 0, buf.length, from);
    const heaps = new Map<string, GcPauses & { maxKb: number }>();
    for (const m of buf.toString('utf8').matchAll(/GC<(0x[0-9a-f]+)>: START \S+ (\d+)kb => (Eden|Full)Collection.*? p=([\d.]+)ms/g)) {
      let h = heaps.get(m[1]!);
      if (!h) heaps.set(m[1]!, (h = { eden: [], full: [], maxKb: 0 }));
      h.maxKb = Math.max(h.maxKb, Number(m[2]));
      (m[3] === 'Eden' ? h.eden : h.full).push(Number(m[4]));
    }
    const main = [...heaps.values()].sort((a, b) => b.maxKb - a.maxKb)[0];
    return { eden: main?.eden ?? [], full: main?.full ?? [] };
  } finally {
    closeSync(fd);
  }
}
