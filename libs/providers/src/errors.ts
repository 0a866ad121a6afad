/**
 * Upstream failures → retry decision + client-facing GatewayError. Shared by every adapter: both wire
 * formats carry the message at `error.message`. Upstream text reaches the client only for errors that are
 * the client's own (a bad request), and then scrubbed of URLs and key-like strings.
 */
import { GatewayError } from '@gw/core';
import type { ClassifiedError, UpstreamErrorKind } from './adapter';
import { outputCapMessage } from './output-cap';
import { genericScrubber, type Scrubber } from './scrubber';

export { outputCapMessage };

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

/**
 * Words in an error body's own `type` or `code` field of an upstream refusing a key for its account's quota or credit
 * (OpenAI's insufficient_quota, billing_hard_limit_reached). Never matched against the message: upstreams echo the
 * client's values there (an invalid field, a model or tool name, flagged text), and a client could word one
 * "you exceeded your current quota" to have every key it reaches set aside. OpenAI's own rate-limit message also says
 * "…add a payment method… /account/billing" to a key that is only rate limited.
 */
export const QUOTA_WORDS = /insufficient[_ ]quota|quota[_ ](?:exceeded|exhausted)|billing|out[_ ]of[_ ]credits|payment[_ ]required/i;

/**
 * Anthropic's answer to an account out of credit: a 400 invalid_request_error whose message IS "Your credit balance is
 * too low to access the Anthropic API…" (it has no code of its own). Matched only at the start of the message: an
 * upstream quoting the client ("Invalid value for 'model': 'Your credit balance is too low…'") is the client's 400.
 */
const CREDIT_REFUSAL = /^Your credit balance is too low to access the \w+ API/i;

/**
 * An upstream refusing the channel's key for its account's quota or credit (the gateway's account, not the client's
 * request): a 429 whose error type or code says so, or Anthropic's 400 credit refusal. Decided from what the upstream
 * states about itself, never from text that may hold the client's input.
 */
export function isQuotaRefusal(status: number, bodyText: string): boolean {
  if (status === 429) return QUOTA_WORDS.test(errorField(bodyText, 'type')) || QUOTA_WORDS.test(errorField(bodyText, 'code'));
  return status === 400 && CREDIT_REFUSAL.test(upstreamMessage(bodyText).trimStart());
}

const quotaExhausted = () => result('auth', true, new GatewayError(502, 'upstream_quota_exhausted', 'The upstream account has no quota left.'));

/** `error.<field>` of an error body when it is a string, else "". */
function errorField(bodyText: string, field: 'type' | 'code'): string {
  try {
    const v = JSON.parse(bodyText)?.error?.[field];
    return typeof v === 'string' ? v : '';
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
export function classifyUpstreamError(status: number, bodyText: string, headers: Headers, scrubber: Scrubber = genericScrubber, sentMaxTokens?: number): ClassifiedError {
  const c = classify(status, bodyText, headers, scrubber, sentMaxTokens);
  const hint = headers.get('x-should-retry');
  // The hint is about sending the same request to the same upstream again. An output cap is that upstream model's, so
  // its "do not retry" says nothing about the model's other channels (Anthropic's 400s carry the header).
  if ((hint === 'true' || hint === 'false') && c.kind !== 'model_limit') c.retryable = hint === 'true';
  return c;
}

/** The longest retry-after (seconds) an upstream's 429 passes on to the client. */
export const MAX_RETRY_AFTER_S = 60;

function classify(status: number, bodyText: string, headers: Headers, scrubber: Scrubber, sentMaxTokens: number | undefined): ClassifiedError {
  // Redirects are never followed (the key would go wherever the Location says): the channel is misconfigured.
  if (status >= 300 && status < 400) return result('server', true, new GatewayError(502, 'upstream_redirect', `The upstream answered with a redirect (HTTP ${status}).`));
  if (status === 429) {
    // An account out of credit (OpenAI: 429 insufficient_quota) is no rate limit: no wait makes it pass, so the
    // client is not told to retry later; it is the channel's fault, like a refused key (the relay sets the key aside).
    if (isQuotaRefusal(status, bodyText)) return quotaExhausted();
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
  if (status === 404) {
    return { ...result('not_found', true, new GatewayError(502, 'upstream_not_found', 'The upstream does not serve this model.')), detail: scrubber.scrub(upstreamMessage(bodyText)) };
  }
  if (status === 413) return result('too_large', false, new GatewayError(413, 'request_too_large', 'The request is too large for the upstream.'));
  if (isQuotaRefusal(status, bodyText)) return quotaExhausted();
  const detail = scrubber.scrub(upstreamMessage(bodyText));
  const tooLong = contextWindowMessage(bodyText, detail);
  if (tooLong) return result('invalid_request', false, new GatewayError(400, 'prompt_too_long', tooLong));
  const cap = outputCapMessage(detail, sentMaxTokens);
  if (cap) return result('model_limit', true, new GatewayError(400, 'max_tokens_too_large', cap, { param: 'max_tokens' }));
  const message = detail ? `The upstream rejected the request: ${detail}` : `The upstream rejected the request (HTTP ${status}).`;
  return result('invalid_request', false, new GatewayError(400, 'upstream_invalid_request', message));
}

/** Anthropic's own wordings of a request beyond the context window (clients match on them). */
const ANTHROPIC_TOO_LONG = /^(prompt is too long|input length and `max_tokens` exceed context limit)/i;
const TOO_LONG = /context_length_exceeded|maximum context length|exceeds the context window|prompt is too long|input length and `max_tokens` exceed context limit/i;
const num = (text: string, ...res: RegExp[]) => {
  for (const re of res) {
    const m = re.exec(text);
    if (m) return Number(m[1]);
  }
  return undefined;
};

/**
 * A 400 saying the request does not fit the model's context window, in Anthropic's words: "prompt is too long:
 * <input> tokens > <window> maximum", or, when the input fits but not with max_tokens, "input length and
 * `max_tokens` exceed context limit: <input> + <max_tokens> > <window>, …". Claude Code compacts the conversation
 * on either wording (a substring match on the message); OpenAI-compatible servers say "This model's maximum
 * context length is …", on which it stayed stuck. Without counts to read, the upstream's text follows
 * "prompt is too long: ". Null for any other error.
 */
export function contextWindowMessage(bodyText: string, detail: string): string | null {
  if (errorField(bodyText, 'code') !== 'context_length_exceeded' && !TOO_LONG.test(detail)) return null;
  if (ANTHROPIC_TOO_LONG.test(detail)) return detail;
  const window = num(detail, /maximum context length is (\d+)/i);
  const input = num(detail, /resulted in (\d+) tokens/i, /\((\d+) in the messages/i, /(\d+) input tokens/i);
  const output = num(detail, /(\d+) in the completion/i, /too large: (\d+)/i);
  if (window !== undefined && input !== undefined) {
    if (input > window || output === undefined) return `prompt is too long: ${input} tokens > ${window} maximum`;
    return `input length and \`max_tokens\` exceed context limit: ${input} + ${output} > ${window}, decrease input length or \`max_tokens\` and try again`;
  }
  return `prompt is too long: ${detail || 'the request exceeds the model\'s context window.'}`;
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
