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

/**
 * Runs `job` every `intervalMs` while `leader` leads (never two runs at once); returns a stop
 * function. A failing run is reported to `onError` and the schedule goes on.
 */
export function everyWhileLeader(leader: Leader, intervalMs: number, job: () => Promise<void>, onError: (err: unknown) => void = () => {}): () => void {
  let running = false;
  const timer = setInterval(async () => {
    if (running || !leader.isLeader) return;
    running = true;
    try {
      await job();
    } catch (err) {
      onError(err);
    } finally {
      running = false;
    }
  }, intervalMs);
  return () => clearInterval(timer);
}
