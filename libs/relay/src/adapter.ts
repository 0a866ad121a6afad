import type { GatewayError } from '@gw/core';
import type { CountTokensRequest, MessagesRequest, Usage, StopReason } from '@gw/formats';

/**
 * What the relay needs of a provider adapter. The provider library (@gw/providers) implements it;
 * this seam keeps the relay's failover and metering logic independent of any one provider.
 */
export interface UpstreamTarget {
  baseUrl: string;
  apiKey: string;
  headers: Record<string, string>;
  /** The model name sent upstream (after the channel's model_mapping). */
  upstreamModel: string;
}

export interface StreamResult {
  /** Usage the upstream reported, or null when it never did (cut stream). */
  usage: Usage | null;
  /** `usage` if known, else an estimate of what was delivered. */
  estimatedUsage: Usage;
  stopReason: StopReason | null;
  /** message_stop was emitted. */
  complete: boolean;
  /** An error event was emitted. */
  failed: boolean;
}

export interface RelayAdapter {
  buildRequest(target: UpstreamTarget, body: MessagesRequest, opts: { stream: boolean; clientHeaders: Headers }): Request;
  decodeResponse(json: unknown, opts: { requestedModel: string; body: MessagesRequest }): { message: Record<string, unknown>; usage: Usage };
  streamDecoder(opts: { requestedModel: string; body: MessagesRequest; inputTokens: number }): {
    transform: TransformStream<Uint8Array, Uint8Array>;
    result(): StreamResult;
  };
  /** An upstream HTTP error (status + body) or a fetch failure (`error`). */
  classify(input: { status?: number; body?: string; headers?: Headers; error?: unknown }): { retryable: boolean; error: GatewayError };
  /** Exact input tokens from the upstream, or null when it cannot count. */
  countTokens(target: UpstreamTarget, body: CountTokensRequest, clientHeaders: Headers, signal: AbortSignal): Promise<number | null>;
}
