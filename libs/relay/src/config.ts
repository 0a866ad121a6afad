import { ConfigError, readBoolEnv, readIntEnv } from '@gw/config';
import { openFileLimit } from '@gw/core';
import { MAX_UPSTREAM_CAP, defaultUpstreamCap } from './upstream-slots';

export interface RelayConfig {
  /** RELAY_MAX_ATTEMPTS (default 3, 1..10): channels tried per request before giving up. */
  maxAttempts: number;
  /** RELAY_HEALTH_FAILURES (default 3, 1..1000): consecutive failures that auto-disable a channel. */
  healthFailures: number;
  /** RELAY_HEALTH_CONFIRM (default true): a probe must also fail before a channel is auto-disabled. */
  healthConfirm: boolean;
  /** RELAY_PROBE_INTERVAL_MS (default 30000, 100..86400000): how often auto-disabled channels are probed. */
  probeIntervalMs: number;
  /** RELAY_PROBE_TIMEOUT_MS (default 10000, 100..600000): time limit of one probe request. */
  probeTimeoutMs: number;
  /** STREAM_BUFFER_BYTES (default 65536, 0..16 MiB): bytes a stream may read ahead of its client. */
  streamBufferBytes: number;
  /** STREAM_STALL_TIMEOUT_MS (default 60000, 100..3600000): a client that takes nothing for this long is cut. */
  streamStallMs: number;
  /**
   * STREAM_MAX_DURATION_MS (default 7200000, 0 = none, else 1000..86400000): a stream's whole life, from the request's
   * arrival. An upstream that sends pings (activity) for ever never trips the idle limit.
   */
  streamMaxMs: number;
  /** SSE_MAX_EVENT_BYTES (default 1 MiB, 1 KiB..64 MiB): the largest single upstream SSE event. */
  sseMaxEventBytes: number;
  /** SSE_KEEPALIVE_MS (default 10000, 0 = off, else 1000..600000): ping interval while a stream's upstream is silent. */
  sseKeepAliveMs: number;
  /** COUNT_TOKENS_CACHE_ENTRIES (default 1024, 0..100000), COUNT_TOKENS_CACHE_TTL_MS (default 60000, 0..3600000),
   * COUNT_TOKENS_MAX_INFLIGHT (default 8, 1..1000): reuse of upstream counts and the per-channel cap. */
  counting: { cacheEntries: number; cacheTtlMs: number; maxInflight: number };
  /** AFFINITY_TTL_SECONDS (default 3600, 0..86400): a conversation's channel pin lives this long after its last request; 0 = no affinity. */
  affinityTtlSeconds: number;
  /** AFFINITY_MAX_ENTRIES (default 100000, 0..10000000): most conversations pinned at once (LRU). */
  affinityMaxEntries: number;
  /** AFFINITY_MAX_PER_USER (default a tenth of AFFINITY_MAX_ENTRIES): most of them one user holds (its own LRU). */
  affinityMaxPerUser: number;
  /** LIMIT_LEASE_MS (default 120000, 1000..3600000): a concurrency slot of a process that died stops counting after this (live ones are renewed). */
  limitLeaseMs: number;
  /**
   * MAX_UPSTREAM_CONNECTIONS (default (nofile - min(1024, nofile/4)) / 2, 1..65471): relayed requests (streams until
   * they close, realtime sessions, upstream counts) in flight at once; beyond it 503 overloaded_error. The process
   * lowers it to BUN_CONFIG_MAX_HTTP_REQUESTS - 64 when Bun was started with fewer fetch slots.
   */
  maxUpstreamConnections: number;
  /**
   * MAX_UPSTREAM_CONNECTIONS_PER_USER (default 0 = none, 0..65471): most of those one user (all its keys) may hold;
   * beyond it 429 user_upstream_share_exceeded, so one account cannot take every slot and starve the others.
   */
  maxUpstreamPerUser: number;
  /**
   * MEDIA_URL_ALLOW_PRIVATE (default false): translated channels pass image URLs pointing at private, loopback or
   * link-local addresses to the upstream, which fetches them from its own network. Off, they are refused (400).
   */
  mediaUrlAllowPrivate: boolean;
}

/** Reads the relay settings; throws ConfigError on a bad value. */
export function relayConfig(env: Record<string, string | undefined>): RelayConfig {
  return {
    maxAttempts: readIntEnv(env, 'RELAY_MAX_ATTEMPTS', 3, 1, 10),
    healthFailures: readIntEnv(env, 'RELAY_HEALTH_FAILURES', 3, 1, 1000),
    healthConfirm: readBoolEnv(env, 'RELAY_HEALTH_CONFIRM', true),
    probeIntervalMs: readIntEnv(env, 'RELAY_PROBE_INTERVAL_MS', 30_000, 100, 86_400_000),
    probeTimeoutMs: readIntEnv(env, 'RELAY_PROBE_TIMEOUT_MS', 10_000, 100, 600_000),
    streamBufferBytes: readIntEnv(env, 'STREAM_BUFFER_BYTES', 65_536, 0, 16 << 20),
    streamStallMs: readIntEnv(env, 'STREAM_STALL_TIMEOUT_MS', 60_000, 100, 3_600_000),
    streamMaxMs: streamMaxMs(readIntEnv(env, 'STREAM_MAX_DURATION_MS', 7_200_000, 0, 86_400_000)),
    sseMaxEventBytes: readIntEnv(env, 'SSE_MAX_EVENT_BYTES', 1 << 20, 1024, 64 << 20),
    sseKeepAliveMs: keepAliveMs(readIntEnv(env, 'SSE_KEEPALIVE_MS', 10_000, 0, 600_000)),
    counting: {
      cacheEntries: readIntEnv(env, 'COUNT_TOKENS_CACHE_ENTRIES', 1024, 0, 100_000),
      cacheTtlMs: readIntEnv(env, 'COUNT_TOKENS_CACHE_TTL_MS', 60_000, 0, 3_600_000),
      maxInflight: readIntEnv(env, 'COUNT_TOKENS_MAX_INFLIGHT', 8, 1, 1000),
    },
    affinityTtlSeconds: readIntEnv(env, 'AFFINITY_TTL_SECONDS', 3600, 0, 86_400),
    affinityMaxEntries: readIntEnv(env, 'AFFINITY_MAX_ENTRIES', 100_000, 0, 10_000_000),
    affinityMaxPerUser: readIntEnv(env, 'AFFINITY_MAX_PER_USER', Math.max(1, Math.ceil(readIntEnv(env, 'AFFINITY_MAX_ENTRIES', 100_000, 0, 10_000_000) / 10)), 1, 10_000_000),
    limitLeaseMs: readIntEnv(env, 'LIMIT_LEASE_MS', 120_000, 1000, 3_600_000),
    maxUpstreamConnections: readIntEnv(env, 'MAX_UPSTREAM_CONNECTIONS', defaultUpstreamCap(openFileLimit()), 1, MAX_UPSTREAM_CAP),
    maxUpstreamPerUser: readIntEnv(env, 'MAX_UPSTREAM_CONNECTIONS_PER_USER', 0, 0, MAX_UPSTREAM_CAP),
    mediaUrlAllowPrivate: readBoolEnv(env, 'MEDIA_URL_ALLOW_PRIVATE', false),
  };
}

/** 0 turns pings off; anything else below 1 s would flood the client. */
function keepAliveMs(v: number): number {
  if (v !== 0 && v < 1000) throw new ConfigError('SSE_KEEPALIVE_MS must be 0 (off) or between 1000 and 600000');
  return v;
}

function streamMaxMs(v: number): number {
  if (v !== 0 && v < 1000) throw new ConfigError('STREAM_MAX_DURATION_MS must be 0 (none) or between 1000 and 86400000');
  return v;
}
