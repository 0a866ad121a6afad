/**
 * A thread of the history reader process that ends the process when the gateway that started it is gone. The
 * reader's own thread notices a lost gateway ('disconnect') only between statements: killed with -9 while the
 * reader ran a year's aggregate, the gateway left it running that statement to its end (seconds to minutes of a
 * core, and a WAL snapshot that keeps checkpoints from finishing), with no time limit, since the limit is the
 * gateway's timer. A dead parent shows as a new parent pid (the orphan is re-parented).
 */
import { parentPort, workerData } from 'node:worker_threads';

const { parent } = workerData as { parent: number };
const CHECK_MS = 200;

setInterval(() => {
  if (process.ppid !== parent) process.kill(process.pid, 'SIGKILL');
}, CHECK_MS);
// The reader runs nothing before this: a thread still starting when a statement began would start only after it.
parentPort!.postMessage('watching');
