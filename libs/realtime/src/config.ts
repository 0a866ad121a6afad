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
  /**
   * Largest client WebSocket message accepted at all (REALTIME_MAX_FRAME_BYTES, Bun's maxPayloadLength): past it Bun
   * closes the socket with 1009 before the gateway sees the frame. Sized for an `input_audio_buffer.append` of 15 MiB
   * of audio (OpenAI's documented maximum: 20 MiB of base64).
   */
  maxFrameBytes: number;
  /**
   * Largest client event the gateway reads as JSON (REALTIME_MAX_EVENT_BYTES): every client frame but a plain audio
   * append (events.ts plainAppend). A larger one is not forwarded: `error` event `event_too_large`, close 1009.
   */
  maxEventBytes: number;
  /** Largest upstream text frame (REALTIME_MAX_UPSTREAM_FRAME_BYTES): a larger one is not relayed and ends the session (1011 to the client, 1009 upstream). */
  maxUpstreamFrameBytes: number;
  /**
   * Bytes of frames (each at least FRAME_COST_BYTES) one session may have the gateway read per second, per direction (REALTIME_READ_BYTES_PER_SECOND;
   * 0 = unlimited). Past it the session's next frame waits (and the socket stops being read) until the allowance
   * refills; a burst as large as the direction's largest frame is always allowed. Nothing is dropped or left unmetered.
   */
  readBytesPerSecond: number;
  /**
   * How long a session whose client left with responses running keeps reading the upstream (REALTIME_CLOSE_GRACE_MS;
   * 0 = close it at once): the gateway cancels them and waits for their response.done, whose usage is what the upstream
   * bills. Else such a response is billed on what the gateway read of it, which a client that stopped reading keeps small.
   */
  closeGraceMs: number;
  /**
   * A client the gateway is sending to that takes nothing of what is queued for it for this long (REALTIME_CLIENT_STALL_MS,
   * at least 1 s) is treated as gone: the session ends as if it had closed (its running responses cancelled and billed via
   * the close grace). Only counts while frames wait for the client, so a quiet client is never cut by it. It cannot be
   * turned off: such a client's socket is paused, and Bun suspends the idle timeout of a paused socket, so nothing else
   * would ever end the session.
   */
  clientStallMs: number;
  /**
   * Bun's WebSocket idleTimeout for realtime clients (REALTIME_IDLE_TIMEOUT_SECONDS, 8 to 960): a client socket from
   * which nothing (not even a pong) arrived for this long is closed. Bun pings shortly before it expires, so a live
   * client that merely says nothing answers and stays.
   */
  idleTimeoutSeconds: number;
}

const MIB = 1024 * 1024;

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
    maxFrameBytes: readIntEnv(env, 'REALTIME_MAX_FRAME_BYTES', 21 * MIB, 1024, 1024 * MIB),
    maxEventBytes: readIntEnv(env, 'REALTIME_MAX_EVENT_BYTES', 8 * MIB, 1024, 1024 * MIB),
    maxUpstreamFrameBytes: readIntEnv(env, 'REALTIME_MAX_UPSTREAM_FRAME_BYTES', 16 * MIB, 1024, 1024 * MIB),
    readBytesPerSecond: readIntEnv(env, 'REALTIME_READ_BYTES_PER_SECOND', 4 * MIB, 0, 1024 * MIB),
    closeGraceMs: readIntEnv(env, 'REALTIME_CLOSE_GRACE_MS', 3000, 0, 60_000),
    clientStallMs: readIntEnv(env, 'REALTIME_CLIENT_STALL_MS', 30_000, 1000, 3_600_000),
    // Bun rounds 1 to 7 up to 8, and 0 would turn the timeout (and its pings) off: a gone client would never be noticed.
    idleTimeoutSeconds: readIntEnv(env, 'REALTIME_IDLE_TIMEOUT_SECONDS', 120, 8, 960),
  };
}
