import { readIntEnv } from '@gw/config';

export interface RelayConfig {
  /** RELAY_MAX_ATTEMPTS (default 3, 1..10): channels tried per request before giving up. */
  maxAttempts: number;
  /** RELAY_HEALTH_FAILURES (default 3, 1..1000): consecutive failures that auto-disable a channel. */
  healthFailures: number;
  /** RELAY_PROBE_INTERVAL_MS (default 30000, 100..86400000): how often auto-disabled channels are probed. */
  probeIntervalMs: number;
  /** RELAY_PROBE_TIMEOUT_MS (default 10000, 100..600000): time limit of one probe request. */
  probeTimeoutMs: number;
}

/** Reads the relay settings; throws ConfigError on a bad value. */
export function relayConfig(env: Record<string, string | undefined>): RelayConfig {
  return {
    maxAttempts: readIntEnv(env, 'RELAY_MAX_ATTEMPTS', 3, 1, 10),
    healthFailures: readIntEnv(env, 'RELAY_HEALTH_FAILURES', 3, 1, 1000),
    probeIntervalMs: readIntEnv(env, 'RELAY_PROBE_INTERVAL_MS', 30_000, 100, 86_400_000),
    probeTimeoutMs: readIntEnv(env, 'RELAY_PROBE_TIMEOUT_MS', 10_000, 100, 600_000),
  };
}
