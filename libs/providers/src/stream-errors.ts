/**
 * The gateway's own texts for streams that fail after their first byte. Upstream error text is never
 * shown in a stream (it can carry the channel's key); only the error type survives, if it is a known one.
 */
import { SseEventTooLargeError } from '@gw/formats';

const KNOWN_TYPES = new Set([
  'invalid_request_error', 'authentication_error', 'permission_error', 'billing_error', 'not_found_error',
  'request_too_large', 'rate_limit_error', 'api_error', 'timeout_error', 'overloaded_error',
]);

/** The error event that replaces an upstream's mid-stream error: a known type kept, our own message. */
export function upstreamStreamError(type: unknown): { type: string; message: string } {
  const t = typeof type === 'string' && KNOWN_TYPES.has(type) ? type : 'api_error';
  return { type: t, message: t === 'overloaded_error' ? 'The upstream is overloaded; the answer was cut short.' : `The upstream failed mid-stream (${t}).` };
}

/** Why reading the upstream failed, in the gateway's words (an oversized event names the cap). */
export function failureMessage(err: unknown): string {
  if (err instanceof SseEventTooLargeError) return err.message;
  if (err instanceof Error && err.name === 'StreamAbortedError') return err.message;
  return 'The upstream connection failed mid-stream.';
}
