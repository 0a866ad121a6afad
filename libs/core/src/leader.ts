/**
 * Leadership as a port: background jobs that must run once per cluster (channel prober,
 * reconciler, purges) run only while `isLeader`. SQLite mode has one process, which always leads
 * (`AlwaysLeader`); PostgreSQL mode uses an advisory lock (`PgAdvisoryLeader` in `@gw/db/pg`).
 *
 * Leadership can overlap for up to one check interval when the old leader's connection dies
 * without it noticing at once, so leader-only jobs must stay idempotent.
 */
export interface Leader {
  /** True while this node leads, as of the last check. */
  readonly isLeader: boolean;
  /** Calls `fn` on every change (true: became leader, false: lost it); returns an unsubscribe. */
  onChange(fn: (leader: boolean) => void): () => void;
  /** Gives leadership up (if held) and stops trying. */
  close(): Promise<void>;
}

export class AlwaysLeader implements Leader {
  readonly isLeader = true;
  onChange(): () => void {
    return () => {};
  }
  async close(): Promise<void> {}
}

export interface LeaderJobOptions {
  /** Reports a failing pass; the schedule goes on. */
  onError?: (err: unknown) => void;
  /** Also runs a pass at once whenever leadership is taken (and at the start when leading already). */
  atOnce?: boolean;
  /** How long the stop function waits for a running pass (default LEADER_STOP_GRACE_MS). */
  stopGraceMs?: number;
}

/**
 * What a stop waits at most for a leader pass still running. The pass's signal is aborted at once, so a pass working
 * in units ends at its next one; a pass stuck inside one (a query waiting on a lock, a database gone silent) is left
 * behind, so a SIGTERM still ends the process: before, the shutdown waited for it without limit. Leader jobs write
 * nothing that is not safe to cut (a charge commits whole or not at all; what a cut pass left is the next leader's).
 */
export const LEADER_STOP_GRACE_MS = 5_000;

/**
 * Runs `job` every `intervalMs` while `leader` leads, never two passes at once on this node; returns a stop
 * function that resolves once a running pass has ended (a shutdown must not close the pool under it), or once
 * `stopGraceMs` has passed, whichever comes first.
 *
 * Each pass gets a signal aborted when this node loses leadership (or is stopped): a pass working in batches
 * checks it between batches and ends there, so after a loss it overlaps the next leader's pass by one batch at
 * most, not by the rest of its backlog. The timer runs only while leading (unref'd: it keeps no process alive).
 */
export function everyWhileLeader(leader: Leader, intervalMs: number, job: (signal: AbortSignal) => Promise<unknown>, opts: LeaderJobOptions = {}): () => Promise<void> {
  let timer: ReturnType<typeof setInterval> | null = null;
  let term: AbortController | null = null;
  let running: Promise<void> | null = null;
  let stopped = false;
  const tick = () => {
    if (running || !term || term.signal.aborted) return;
    const signal = term.signal;
    running = (async () => {
      try {
        await job(signal);
      } catch (err) {
        opts.onError?.(err);
      } finally {
        running = null;
      }
    })();
  };
  const lead = () => {
    if (timer || stopped) return;
    term = new AbortController();
    timer = setInterval(tick, intervalMs);
    (timer as { unref?: () => void }).unref?.();
    if (opts.atOnce) tick();
  };
  const follow = () => {
    if (timer) clearInterval(timer);
    timer = null;
    term?.abort();
    term = null;
  };
  const unsubscribe = leader.onChange((leads) => (leads ? lead() : follow()));
  if (leader.isLeader) lead();
  return async () => {
    stopped = true;
    unsubscribe();
    follow();
    if (!running) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([running, new Promise<void>((r) => { timer = setTimeout(r, opts.stopGraceMs ?? LEADER_STOP_GRACE_MS); })]);
    clearTimeout(timer);
  };
}
