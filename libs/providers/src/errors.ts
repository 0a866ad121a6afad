/**
 * Upstream failures → retry decision + client-facing GatewayError. Shared by every adapter: both wire
 * formats carry the message at `error.message`. Upstream text reaches the client only for errors that are
 * the client's own (a bad request), and then scrubbed of URLs and key-like strings.
 */
import { GatewayError } from '@gw/core';
import type { ClassifiedError, UpstreamErrorKind } from './adapter';
import { genericScrubber, type Scrubber } from './scrubber';

/** Removes what could identify the upstream or its credentials from a message (no channel secrets known). */
export function scrub(text: string): string {
  return genericScrubber.scrub(text);
}

/** The `error.message` of an Anthropic or OpenAI error body, if any. */
export function upstreamMessage(bodyText: string): string {
  try {
    const j = JSON.parse(bodyText);
    const m = j?.error?.message ?? j?.message ?? (typeof j?.error === 'string' ? j.error : undefined);
    return typeof m === 'string' ? m : '';
  } catch {
    return '';
  }
}

const result = (kind: UpstreamErrorKind, retryable: boolean, error: GatewayError): ClassifiedError => ({ kind, retryable, error });

/**
 * Classifies an upstream HTTP error. Retryable (another channel may work): 408, 409, 429, 5xx, and the
 * channel's own faults (401/402/403/404: bad key, unpaid, no such model). Not retryable: other 4xx, which
 * would fail the same way anywhere. An upstream `x-should-retry` header overrides the decision.
 */
export function classifyUpstreamError(status: number, bodyText: string, headers: Headers, scrubber: Scrubber = genericScrubber): ClassifiedError {
  const c = classify(status, bodyText, headers, scrubber);
  const hint = headers.get('x-should-retry');
  if (hint === 'true' || hint === 'false') c.retryable = hint === 'true';
  return c;
}

/** The longest retry-after (seconds) an upstream's 429 passes on to the client. */
export const MAX_RETRY_AFTER_S = 60;

function classify(status: number, bodyText: string, headers: Headers, scrubber: Scrubber): ClassifiedError {
  // Redirects are never followed (the key would go wherever the Location says): the channel is misconfigured.
  if (status >= 300 && status < 400) return result('server', true, new GatewayError(502, 'upstream_redirect', `The upstream answered with a redirect (HTTP ${status}).`));
  if (status === 429) {
    const retryAfter = headers.get('retry-after');
    // Passed on to the client, at most MAX_RETRY_AFTER_S: an upstream (a reseller) saying to wait a day or 10^20
    // seconds would otherwise park clients that honour it, when another channel may answer at once.
    const opts = retryAfter && /^\d+$/.test(retryAfter) ? { headers: { 'retry-after': String(Math.min(Number(retryAfter), MAX_RETRY_AFTER_S)) } } : {};
    return result('rate_limit', true, new GatewayError(429, 'upstream_rate_limited', 'The upstream is rate limiting requests; try again later.', opts));
  }
  if (status === 408 || status === 504) return result('timeout', true, new GatewayError(504, 'upstream_timeout', 'The upstream timed out.'));
  if (status === 503 || status === 529) return result('overloaded', true, new GatewayError(503, 'upstream_overloaded', 'The upstream is overloaded; try again later.'));
  if (status >= 500 || status === 409) return result('server', true, new GatewayError(502, 'upstream_error', `The upstream failed (HTTP ${status}).`));
  if (status === 401 || status === 402 || status === 403) {
    return result('auth', true, new GatewayError(502, 'upstream_auth_failed', 'The upstream rejected the gateway\'s credentials.'));
  }
  if (status === 404) return result('not_found', true, new GatewayError(502, 'upstream_not_found', 'The upstream does not serve this model.'));
  if (status === 413) return result('too_large', false, new GatewayError(413, 'request_too_large', 'The request is too large for the upstream.'));
  const detail = scrubber.scrub(upstreamMessage(bodyText));
  const message = detail ? `The upstream rejected the request: ${detail}` : `The upstream rejected the request (HTTP ${status}).`;
  return result('invalid_request', false, new GatewayError(400, 'upstream_invalid_request', message));
}

/**
 * A failure before any HTTP response (DNS, refused or reset connection, TLS, timeout): always retryable.
 * `timedOut` is the relay's own verdict (its abort signal fired).
 */
export function classifyTransportError(cause: unknown, timedOut = false): ClassifiedError {
  if (timedOut) return result('timeout', true, new GatewayError(504, 'upstream_timeout', 'The upstream timed out.', { cause }));
  return result('unreachable', true, new GatewayError(502, 'upstream_unreachable', 'The upstream could not be reached.', { cause }));
}

/** A 2xx body that is not what the protocol promises. */
export function badUpstreamResponse(what: string): GatewayError {
  return new GatewayError(502, 'upstream_bad_response', `The upstream sent an invalid response (${what}).`);
}
