import type { Logger } from '@gw/core';

/** A channel as health checks see it. */
export interface HealthChannel {
  id: number;
  status: number;
}

export interface HealthDeps {
  /** Every channel (any status), from the in-memory registry. */
  all(): HealthChannel[];
  get(id: number): HealthChannel | undefined;
  /** ChannelService.setStatus: 1 enabled, 3 auto-disabled. Never called with 2. */
  setStatus(id: number, status: 1 | 3, reason: string): void;
  /** One cheap upstream request; resolves true when the channel answered successfully. */
  probe(id: number): Promise<boolean>;
  log?: Logger;
}

const AUTO_DISABLED = 3;
const ENABLED = 1;

/**
 * Channel health: counts consecutive failures per channel in memory; at the threshold the channel is
 * auto-disabled (status 3). A background prober (timer unref'd, stopped by close) tries each
 * auto-disabled channel and re-enables it on success. Status 2 (an operator's decision) is never
 * touched: the prober only acts on status 3, and checks again right before re-enabling.
 */
export class ChannelHealth {
  private readonly failures = new Map<number, number>();
  private timer: ReturnType<typeof setInterval> | null = null;
  private probing = false;
  /** Channels whose disable is being confirmed by a probe (one probe at a time per channel). */
  private readonly confirming = new Set<number>();

  constructor(private readonly deps: HealthDeps, private readonly opts: { threshold: number; probeIntervalMs: number }) {}

  success(id: number): void {
    if (this.failures.size) this.failures.delete(id);
  }

  /**
   * Records a failure. At the threshold the channel is not disabled on the word of the failing requests
   * alone: one neutral probe request decides. A client can make an upstream fail on purpose (an input that
   * crashes it), and failover spreads one such request over every channel of a model; only a channel that
   * also fails the probe goes down. Resolves true when it disabled the channel.
   */
  async failure(id: number, reason: string): Promise<boolean> {
    const n = (this.failures.get(id) ?? 0) + 1;
    this.failures.set(id, n);
    if (n < this.opts.threshold || this.confirming.has(id)) return false;
    if (this.deps.get(id)?.status !== ENABLED) return false;
    this.confirming.add(id);
    try {
      const healthy = await this.deps.probe(id).catch(() => false);
      this.failures.delete(id);
      if (healthy) {
        this.deps.log?.info('channel.kept', { channel: id, reason, msg: `${n} failures, but the probe succeeded` });
        return false;
      }
      // An operator may have changed the status while the probe ran: only an enabled channel is disabled.
      if (this.deps.get(id)?.status !== ENABLED) return false;
      this.deps.setStatus(id, AUTO_DISABLED, `auto-disabled after ${n} consecutive failures and a failed probe: ${reason}`.slice(0, 500));
      this.deps.log?.warn('channel.auto_disabled', { channel: id, reason });
      return true;
    } finally {
      this.confirming.delete(id);
    }
  }

  consecutiveFailures(id: number): number {
    return this.failures.get(id) ?? 0;
  }

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.probeOnce(), this.opts.probeIntervalMs);
    this.timer.unref?.();
  }

  /** Probes every auto-disabled channel once (one round at a time); returns the ids re-enabled. */
  async probeOnce(): Promise<number[]> {
    if (this.probing) return [];
    this.probing = true;
    try {
      const down = this.deps.all().filter((c) => c.status === AUTO_DISABLED);
      const results = await Promise.all(down.map(async (c) => ((await this.deps.probe(c.id).catch(() => false)) ? c.id : null)));
      const healed: number[] = [];
      for (const id of results) {
        if (id === null || this.deps.get(id)?.status !== AUTO_DISABLED) continue;
        this.deps.setStatus(id, ENABLED, '');
        this.failures.delete(id);
        this.deps.log?.info('channel.re_enabled', { channel: id, by: 'health probe' });
        healed.push(id);
      }
      return healed;
    } finally {
      this.probing = false;
    }
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}
