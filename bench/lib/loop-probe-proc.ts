/**
 * An idle process that only measures its own event-loop delay (every argv[2] ms): on this shared machine
 * that is the delay the OS scheduler alone adds to any process. Prints one line when ready, then one JSON
 * window ({p50,p99,p999,max} in ms, since the previous one) per "window" line on stdin.
 */
import { LoopDelayMonitor } from '@gw/core';

const m = new LoopDelayMonitor(Number(process.argv[2] ?? 1));
console.log('{"ready":true}');
for await (const _ of console) {
  const s = m.snapshot();
  m.reset();
  console.log(JSON.stringify({ p50: s.p50, p99: s.p99, p999: s.p999, max: s.max }));
}
