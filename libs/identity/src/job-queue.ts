/**
 * A bounded in-process queue of background jobs with retries. Work that must not show in a request's
 * timing (looking up an address, writing a token, talking to SMTP) is enqueued on the request path
 * in constant time and runs after the response, one job at a time. A job that throws is retried
 * after each of `retryDelaysMs`, then dropped with a log line. A graceful stop gives queued jobs a bounded time
 * to run (`close(graceMs)`); what is still queued then, or at a kill, is lost (close() reports how many).
 */
import { errorText, stdLogger, type Logger } from '@gw/core';

export interface JobQueueOptions {
  /** Pending jobs kept at most; beyond it new jobs are refused (logged), so a flood cannot grow memory. */
  maxPending?: number;
  /** Delay before each retry; its length is the number of retries. */
  retryDelaysMs?: number[];
  log?: Logger;
}

interface Job { label: string; run: () => Promise<void>; attempt: number }

export class JobQueue {
  private readonly pending: Job[] = [];
  /** Jobs waiting for a retry, by their timer. */
  private readonly timers = new Map<ReturnType<typeof setTimeout>, Job>();
  private running = false;
  /** No new jobs and no more retries (a stop has begun); `closed`: nothing more runs at all. */
  private closing = false;
  private closed = false;
  private readonly maxPending: number;
  private readonly retryDelaysMs: number[];
  private readonly log: Logger;

  constructor(opts: JobQueueOptions = {}) {
    this.maxPending = opts.maxPending ?? 10_000;
    this.retryDelaysMs = opts.retryDelaysMs ?? [2_000, 15_000, 60_000];
    this.log = opts.log ?? stdLogger;
  }

  /** Queues `run`; returns at once. `label` names the job in log lines (never put secrets in it). */
  enqueue(label: string, run: () => Promise<void>): boolean {
    if (this.closing) return false;
    if (this.pending.length >= this.maxPending) {
      this.log.warn('job.dropped', { job: label, reason: 'queue full', max_pending: this.maxPending });
      return false;
    }
    this.pending.push({ label, run, attempt: 0 });
    this.kick();
    return true;
  }

  /** Jobs waiting or waiting for a retry. */
  get size(): number { return this.pending.length + this.timers.size; }

  /** Resolves once nothing is queued or running (retries scheduled for later do not count). */
  async idle(): Promise<void> {
    while (this.running || this.pending.length) await Bun.sleep(5);
  }

  /**
   * Stops taking and retrying jobs. Jobs still queued get `graceMs` to run (a job waiting for a retry gets
   * its next attempt at once, its last); past it, or with no grace, the rest is dropped and counted in one log
   * line. A job running at the deadline is counted too: the process is about to end under it.
   */
  async close(graceMs = 0): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    for (const [t, job] of this.timers) {
      clearTimeout(t);
      if (graceMs > 0) this.pending.push({ ...job, attempt: job.attempt + 1 });
    }
    const retrying = graceMs > 0 ? 0 : this.timers.size;
    this.timers.clear();
    if (graceMs > 0 && (this.pending.length || this.running)) {
      this.kick();
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([this.idle(), new Promise<void>((r) => { timer = setTimeout(r, graceMs); })]);
      clearTimeout(timer);
    }
    this.closed = true;
    const lost = this.pending.length + retrying + (graceMs > 0 && this.running ? 1 : 0);
    this.pending.length = 0;
    if (lost) this.log.warn('job.queue_closed', { not_done: lost });
  }

  private kick(): void {
    if (this.running || this.closed) return;
    this.running = true;
    // After the current request's response: setImmediate runs once the event loop has written it.
    setImmediate(() => void this.drain());
  }

  private async drain(): Promise<void> {
    try {
      for (let job = this.pending.shift(); job && !this.closed; job = this.pending.shift()) {
        try {
          await job.run();
        } catch (err) {
          this.retry(job, err);
        }
      }
    } finally {
      this.running = false;
    }
  }

  private retry(job: Job, err: unknown): void {
    const cause = errorText(err);
    const delay = this.retryDelaysMs[job.attempt];
    if (delay === undefined || this.closing) {
      this.log.warn('job.failed', { job: job.label, attempts: job.attempt + 1, cause });
      return;
    }
    this.log.warn('job.retry', { job: job.label, attempt: job.attempt + 1, retry_ms: delay, cause });
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      if (this.closing) return;
      this.pending.push({ ...job, attempt: job.attempt + 1 });
      this.kick();
    }, delay);
    timer.unref?.();
    this.timers.set(timer, job);
  }
}
