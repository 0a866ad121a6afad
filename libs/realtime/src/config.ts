/**
 * Realtime relay settings, read once at start-up (a bad value stops the process with one line).
 */
import { ConfigError, readIntEnv } from '@gw/config';

export interface RealtimeConfig {
  /** Model used when the client omits `?model=` (REALTIME_DEFAULT_MODEL). */
  defaultModel: string;
  /** Live sessions one API key may hold at once; 0 = unlimited (REALTIME_MAX_SESSIONS_PER_KEY). */
  maxSessionsPerKey: number;
  /** A session is closed with 1008 after this many seconds; 0 = unlimited (REALTIME_MAX_SESSION_SECONDS). */
  maxSessionSeconds: number;
  /** Time allowed for one upstream WebSocket handshake before the next channel is tried (REALTIME_CONNECT_TIMEOUT_MS). */
  connectTimeoutMs: number;
  /**
   * Backpressure threshold in bytes (REALTIME_BUFFER_BYTES): when this much is queued towards one side
   * (or buffered while the upstream connects), the other side stops being read until it drains to half.
   */
  bufferBytes: number;
  /**
   * Max output tokens assumed for a response when neither the session (`max_response_output_tokens`)
   * nor the response sets one, or sets "inf" (REALTIME_RESERVE_TOKENS). A response reserves the context
   * window at the dearest input price plus this at the dearest output price; output beyond it is not billed.
   */
  reserveTokens: number;
}

/** Reads the REALTIME_* variables; throws ConfigError on a bad value. */
export function realtimeConfig(env: Record<string, string | undefined>): RealtimeConfig {
  const defaultModel = env.REALTIME_DEFAULT_MODEL?.trim() || 'gpt-realtime';
  if (defaultModel.length > 200 || /\s/.test(defaultModel)) throw new ConfigError(`REALTIME_DEFAULT_MODEL must be a model name, got "${defaultModel}"`);
  return {
    defaultModel,
    maxSessionsPerKey: readIntEnv(env, 'REALTIME_MAX_SESSIONS_PER_KEY', 10, 0, 100_000),
    maxSessionSeconds: readIntEnv(env, 'REALTIME_MAX_SESSION_SECONDS', 3600, 0, 7 * 86_400),
    connectTimeoutMs: readIntEnv(env, 'REALTIME_CONNECT_TIMEOUT_MS', 10_000, 100, 120_000),
    bufferBytes: readIntEnv(env, 'REALTIME_BUFFER_BYTES', 4 * 1024 * 1024, 1024, 1024 * 1024 * 1024),
    reserveTokens: readIntEnv(env, 'REALTIME_RESERVE_TOKENS', 4096, 0, 10_000_000),
  };
}
