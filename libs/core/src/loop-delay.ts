/**
 * Event-loop delay: how late a timer due every `resolutionMs` actually fires. A request that arrives
 * while the loop is busy waits as long, so this is the process's own share of tail latency, read
 * from inside the process (perf_hooks.monitorEventLoopDelay, which Bun implements).
 * Costs one timer wake-up per `resolutionMs` while on, nothing when never started.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';

/** Milliseconds. `count` is the number of samples; percentiles are NaN when there are none. */
export interface LoopDelaySnapshot {
  count: number;
  min: number;
  mean: number;
  p50: number;
  p99: number;
  p999: number;
  max: number;
}

/** The quantiles exported to /metrics (gateway_event_loop_delay_seconds{quantile}); 1 is the maximum. */
export const LOOP_DELAY_QUANTILES = [0.5, 0.9, 0.99, 0.999, 1] as const;

export class LoopDelayMonitor {
  private readonly h: ReturnType<typeof monitorEventLoopDelay>;

  constructor(readonly resolutionMs: number) {
    if (!Number.isInteger(resolutionMs) || resolutionMs < 1) throw new RangeError('resolutionMs must be a positive integer');
    this.h = monitorEventLoopDelay({ resolution: resolutionMs });
    this.h.enable();
  }

  /** Delay at quantile q (0..1), in ms; q = 1 is the maximum. */
  quantile(q: number): number {
    if (!this.h.count) return NaN;
    // The histogram's buckets can put a percentile a few µs above the exact maximum it also keeps.
    return q >= 1 ? this.h.max / 1e6 : Math.min(this.h.percentile(q * 100), this.h.max) / 1e6;
  }

  /** Everything since the last reset (or start), in ms. */
  snapshot(): LoopDelaySnapshot {
    const none = !this.h.count;
    const ms = (ns: number) => (none ? NaN : ns / 1e6);
    return {
      count: this.h.count, min: ms(this.h.min), mean: ms(this.h.mean),
      p50: this.quantile(0.5), p99: this.quantile(0.99), p999: this.quantile(0.999), max: ms(this.h.max),
    };
  }

  /** Starts a new measurement window. */
  reset(): void {
    this.h.reset();
  }

  stop(): void {
    this.h.disable();
  }
}
