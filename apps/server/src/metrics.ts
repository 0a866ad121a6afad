/**
 * The gateway's metrics: names, label sets and where each is fed from. Labels come from bounded sets
 * only (route templates, channel ids, model names an operator configured, status codes).
 */
import { LOOP_DELAY_QUANTILES, LoopDelayMonitor, MetricsRegistry, type Counter, type Histogram } from '@gw/core';
import type { SettlementRow } from '@gw/db';

const SECONDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

export interface GatewayMetrics {
  registry: MetricsRegistry;
  http: Counter;
  httpSeconds: Histogram;
  upstream: Counter;
  tokens: Counter;
  charged: Counter;
  metered: Counter;
  /** Throws and rejections nothing handled (logged as `process.uncaught`; the process serves on). */
  uncaught: Counter;
  /** Feeds the settlement counters (QuotaService's `observe`). */
  settlement(row: SettlementRow): void;
}

export function createMetrics(): GatewayMetrics {
  const registry = new MetricsRegistry();
  const m: GatewayMetrics = {
    registry,
    http: registry.counter('gateway_http_requests_total', 'HTTP requests by method, route template and status'),
    httpSeconds: registry.histogram('gateway_http_request_duration_seconds', 'Time until the response (headers, for streams) by route template', SECONDS),
    upstream: registry.counter('gateway_upstream_attempts_total', 'Upstream attempts by channel and result (ok, error, rate_limited)'),
    tokens: registry.counter('gateway_tokens_total', 'Metered tokens by model and kind'),
    charged: registry.counter('gateway_quota_charged_total', 'Quota units charged by model'),
    metered: registry.counter('gateway_metered_requests_total', 'Metered requests (messages and realtime responses) by model, kind and status'),
    uncaught: registry.counter('gateway_uncaught_errors_total', 'Throws and promise rejections no handler caught, by kind (exception, rejection); logged as process.uncaught, the process serves on'),
    settlement(row) {
      const model = row.model;
      m.metered.inc({ model, kind: row.kind, status: row.status });
      if (row.cost > 0) m.charged.inc({ model }, row.cost);
      // Once per settlement: no array of pairs built each time.
      if (row.inputTokens > 0) m.tokens.inc({ model, kind: 'input' }, row.inputTokens);
      if (row.outputTokens > 0) m.tokens.inc({ model, kind: 'output' }, row.outputTokens);
      if (row.cacheReadTokens > 0) m.tokens.inc({ model, kind: 'cache_read' }, row.cacheReadTokens);
      if (row.cacheWriteTokens > 0) m.tokens.inc({ model, kind: 'cache_write' }, row.cacheWriteTokens);
      if (row.audioInputTokens > 0) m.tokens.inc({ model, kind: 'audio_input' }, row.audioInputTokens);
      if (row.audioOutputTokens > 0) m.tokens.inc({ model, kind: 'audio_output' }, row.audioOutputTokens);
    },
  };
  return m;
}

/**
 * LOOP_DELAY_SAMPLE_MS > 0: gateway_event_loop_delay_seconds{quantile} (quantile="1" is the maximum) over
 * the time since the previous scrape, as prom-client's nodejs_eventloop_lag_* do: each scrape starts a new
 * window, so a spike shows once, in the scrape that covers it. Returns the stop function.
 */
export function watchLoopDelay(registry: MetricsRegistry, sampleMs: number): () => void {
  const monitor = new LoopDelayMonitor(sampleMs);
  registry.gauge('gateway_event_loop_delay_seconds', `Event-loop delay since the previous scrape (sampled every ${sampleMs} ms), by quantile; 1 = maximum`, () => {
    const samples = LOOP_DELAY_QUANTILES.map((q): [{ quantile: number }, number] => [{ quantile: q }, monitor.quantile(q) / 1000]);
    monitor.reset();
    return samples;
  });
  return () => monitor.stop();
}
