/**
 * WORKERS=N (PostgreSQL mode): this process serves nothing itself; it runs N copies of the server entry
 * that share the port through SO_REUSEPORT (the kernel spreads connections over them). It forwards
 * SIGTERM/SIGINT to every child, restarts a child that dies on its own (backoff doubling from 250 ms to
 * 30 s, back to the start once a child stayed up for a minute), and exits once every child has exited
 * after a signal, with the first non-zero exit code seen, else 0.
 */
import type { Logger } from '@gw/core';

export interface SupervisorOptions {
  workers: number;
  /** The command of one worker (default: this process's own, re-run). */
  cmd?: string[];
  env?: Record<string, string | undefined>;
  log: Logger;
  /** Lets tests shorten the backoff. */
  backoffMs?: { first: number; max: number; resetAfter: number };
}

interface Slot {
  proc: Bun.Subprocess | null;
  startedAt: number;
  delay: number;
  timer: ReturnType<typeof setTimeout> | null;
}

/** Runs the workers until a signal stops them all; resolves with the exit code the supervisor should use. */
export function superviseWorkers(o: SupervisorOptions): Promise<number> {
  const backoff = o.backoffMs ?? { first: 250, max: 30_000, resetAfter: 60_000 };
  const cmd = o.cmd ?? [process.execPath, ...process.execArgv, ...process.argv.slice(1)];
  // Each worker is one node of the cluster: one process, binding with port reuse on purpose.
  const env = { ...(o.env ?? process.env), WORKERS: '1', LISTEN_REUSE_PORT: 'true' };
  const slots: Slot[] = Array.from({ length: o.workers }, () => ({ proc: null, startedAt: 0, delay: backoff.first, timer: null }));
  let stopping = false;
  let exitCode = 0;
  let finish: (code: number) => void = () => {};
  const done = new Promise<number>((resolve) => (finish = resolve));

  const allExited = () => slots.every((s) => s.proc === null && s.timer === null);

  const start = (i: number) => {
    const slot = slots[i]!;
    slot.timer = null;
    if (stopping) return;
    slot.startedAt = Date.now();
    const proc = Bun.spawn(cmd, {
      env, stdin: 'ignore', stdout: 'inherit', stderr: 'inherit',
      onExit: (_p, code, signal) => {
        slot.proc = null;
        if (stopping) {
          if (code && !exitCode) exitCode = code;
          if (allExited()) finish(exitCode);
          return;
        }
        if (Date.now() - slot.startedAt >= backoff.resetAfter) slot.delay = backoff.first;
        o.log.warn('worker.exited', { worker: i, pid: proc.pid, code: code ?? '', signal: signal ?? '', restart_in_ms: slot.delay });
        slot.timer = setTimeout(() => start(i), slot.delay);
        slot.delay = Math.min(backoff.max, slot.delay * 2);
      },
    });
    slot.proc = proc;
    o.log.info('worker.started', { worker: i, pid: proc.pid });
  };

  const stop = (signal: NodeJS.Signals) => {
    if (!stopping) o.log.info('workers.stopping', { signal, workers: o.workers });
    stopping = true;
    for (const s of slots) {
      if (s.timer) clearTimeout(s.timer);
      s.timer = null;
      s.proc?.kill(signal);
    }
    if (allExited()) finish(exitCode);
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  for (let i = 0; i < slots.length; i++) start(i);
  return done;
}
