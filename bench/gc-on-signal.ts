/**
 * Preloaded into the bench gateway by bench/streams.ts: SIGUSR2 runs a full garbage collection (so RSS is
 * read without garbage) and, with BENCH_HEAP=1, prints the JS heap size and the most numerous object types.
 * BENCH_HEAP_SNAPSHOT=<prefix>: each SIGUSR2 also writes a V8-format heap snapshot to <prefix>-<n>.json
 * (bench/heap-diff.ts compares two of them by type and function name).
 */
import { heapStats } from 'bun:jsc';

let snapshots = 0;
process.on('SIGUSR2', () => {
  Bun.gc(true);
  if (process.env.BENCH_HEAP_SNAPSHOT) {
    require('node:fs').writeFileSync(`${process.env.BENCH_HEAP_SNAPSHOT}-${snapshots++}.json`, Bun.generateHeapSnapshot("v8"));
  }
  if (process.env.BENCH_HEAP !== '1') return;
  const h = heapStats();
  const m = process.memoryUsage();
  const mb = (n: number) => `${(n / 1048576).toFixed(1)} MB`;
  process.stderr.write(`memory: rss ${mb(m.rss)}, JS heap used ${mb(m.heapUsed)} of ${mb(m.heapTotal)}, external ${mb(m.external)}, array buffers ${mb(m.arrayBuffers)}; jsc extra ${mb(h.extraMemorySize)}\n`);
  const top = Object.entries(h.objectTypeCounts).sort((a, b) => b[1] - a[1]).slice(0, 25);
  process.stderr.write(`heap ${(h.heapSize / 1048576).toFixed(1)} MB, ${h.objectCount} objects; ${top.map(([k, v]) => `${k}=${v}`).join(' ')}\n`);
});
