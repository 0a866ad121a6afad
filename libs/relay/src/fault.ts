/**
 * The one place that decides whose fault a failed attempt is. Only what the upstream caused may count
 * against a channel's health or move the request to another channel. A request that cannot even be built
 * (untranslatable content, a body that overflows the stack while serialising) is the client's 400; a client
 * that went away is `client_closed`. Neither touches health, neither fails over.
 */
import { GatewayError } from '@gw/core';
import { classifyTransportError, type ClassifiedError } from '@gw/providers';

export interface FailureVerdict {
  fault: 'client' | 'upstream';
  /** Another channel may succeed. */
  retryable: boolean;
  /** Counts toward auto-disabling the channel. */
  health: boolean;
  /** For metrics: a 429 is "busy", not "broken". */
  rateLimited: boolean;
  error: GatewayError;
}

export type FailureInput =
  /** Building the upstream request threw (translator refusal, RangeError, anything). */
  | { phase: 'build'; cause: unknown }
  /** The upstream answered with a non-2xx status, as the adapter classified it. */
  | { phase: 'status'; classified: ClassifiedError }
  /** Connecting, reading or decoding failed. */
  | { phase: 'transport' | 'decode'; cause: unknown; timedOut?: boolean };

/** Why a client-gone request ended: the abort reason if it is ours (e.g. a revoked key), else client_closed. */
export function abortError(signal: AbortSignal | undefined): GatewayError {
  const reason = signal?.reason;
  if (reason instanceof GatewayError) return reason;
  return new GatewayError(499, 'client_closed', 'The client closed the request.', { type: 'invalid_request_error' });
}

const client = (error: GatewayError): FailureVerdict => ({ fault: 'client', retryable: false, health: false, rateLimited: false, error });

/** Decides a failed attempt. `signal` is the client's: once it fired, nothing is the upstream's fault. */
export function judgeFailure(f: FailureInput, signal?: AbortSignal): FailureVerdict {
  if (signal?.aborted) return client(abortError(signal));
  switch (f.phase) {
    case 'build': {
      if (f.cause instanceof GatewayError && f.cause.status < 500) return client(f.cause);
      return client(new GatewayError(400, 'invalid_request', 'The request cannot be sent upstream (too deeply nested or not translatable for this model).', { cause: f.cause, type: 'invalid_request_error' }));
    }
    case 'status': {
      const c = f.classified;
      // A model's limit is the request meeting that channel's model: no fault of the channel (no health), yet another may serve it.
      const upstreamFault = c.kind !== 'invalid_request' && c.kind !== 'too_large' && c.kind !== 'model_limit';
      return { fault: upstreamFault ? 'upstream' : 'client', retryable: c.retryable, health: c.retryable && c.kind !== 'rate_limit' && c.kind !== 'model_limit', rateLimited: c.kind === 'rate_limit', error: c.error };
    }
    case 'transport': {
      const c = classifyTransportError(f.cause, f.timedOut);
      return { fault: 'upstream', retryable: true, health: true, rateLimited: false, error: c.error };
    }
    case 'decode': {
      const error = f.cause instanceof GatewayError ? f.cause : new GatewayError(502, 'upstream_bad_response', 'The upstream sent an invalid response', { cause: f.cause });
      return { fault: 'upstream', retryable: true, health: true, rateLimited: false, error };
    }
  }
}
