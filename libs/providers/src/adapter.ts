/**
 * The one interface every upstream kind implements. Generic code (the relay) only talks to this; a
 * difference between upstreams becomes a method or an option here, never an `if (type === …)` elsewhere.
 */
import type { GatewayError } from '@gw/core';
import type { ReasoningEcho } from './reasoning-echo';
import type { Scrubber } from './scrubber';

import type { AnthropicMessage, CountTokensRequest, MessagesRequest, Usage } from '@gw/formats';

/** Where and how to reach one channel's upstream. */
export interface UpstreamTarget {
  /** Origin without `/v1`, e.g. `https://api.openai.com`; a trailing slash is tolerated. */
  baseUrl: string;
  apiKey: string;
  /** The model name sent upstream (after the channel's model mapping). */
  upstreamModel: string;
  /** Channel-configured headers, applied last. */
  extraHeaders: Record<string, string>;
  /** Client headers the channel's header policy forwards as sent (never auth or protocol headers). */
  forwardedHeaders?: Record<string, string>;
  /** For the relay's own timeouts; adapters ignore it. */
  timeoutMs?: number;
  /** Whether a translating adapter sends thinking back as `reasoning_content`; absent = `auto`. */
  reasoningEcho?: ReasoningEcho;
  /** False: a translating adapter leaves out `stream_options` (the upstream refused it); absent = sent. */
  streamUsage?: boolean;
  /** True: a translating adapter passes private-address media URLs on (MEDIA_URL_ALLOW_PRIVATE); absent = refused. */
  allowPrivateMediaUrls?: boolean;
}

/** A ready-to-send fetch call. */
export interface UpstreamRequest {
  url: string;
  /** `redirect: 'manual'`: a channel's 3xx is an upstream error, never followed (with the key) elsewhere. */
  init: { method: 'POST'; headers: Record<string, string>; body: string; redirect: 'manual' };
}

/** What the decoders need to know about the client's request. See `decodeContextFor`. */
export interface DecodeContext {
  /** The model the client asked for: every response echoes it, whatever the upstream calls it. */
  requestedModel: string;
  /** The client's stop_sequences (lets translators recognise a matched one). */
  stopSequences?: readonly string[];
  /** Input tokens estimated before the call; sent in a translated stream's message_start. */
  inputTokens?: number;
  /** Fixed message id (tests); otherwise a fresh `msg_…`. */
  messageId?: string;
  /** Tool names a translating adapter renamed upstream → the client's names (empty when none were). */
  toolNames?: Readonly<Record<string, string>>;
  /** Cap of one upstream SSE event (SSE_MAX_EVENT_BYTES); default the parser's. */
  maxEventBytes?: number;
  /** Clock for `firstByteAt` (ms); default Date.now. */
  now?: () => number;
}

/** A JSON answer forwarded as the upstream's bytes (see `passMessagesResponse`). */
export interface PassedMessage {
  /** The bytes for the client: the upstream's, with `model` replaced by the requested name when it differs. */
  body: Uint8Array;
  usage: Usage;
}

export interface DecodedMessage {
  message: AnthropicMessage;
  /** Usage the upstream reported; null if it reported none. */
  usage: Usage | null;
  /** When usage is null: the estimate the adapter put in message.usage, billed as such (absent: zeros sent). */
  estimatedUsage?: Usage;
}

/** The outcome of a streamed answer, for metering and logs. Final once the output stream has ended. */
export type ReportedPeak = Pick<Usage, 'input_tokens' | 'cache_read_input_tokens' | 'cache_creation_input_tokens'>;

export interface StreamResult {
  /** Final usage as the upstream reported it; null when it never did (stream cut, no usage chunk). */
  usage: Usage | null;
  /** `usage` when known, else the best estimate (reported input + output estimated from streamed text). */
  estimatedUsage: Usage;
  stopReason: string | null;
  /**
   * Code-execution calls whose server_tool_use block reached the client (Anthropic's code-execution tool: the
   * usage has no count for them); absent = none.
   */
  codeExecutionCalls?: number;
  /**
   * The highest usable input, cache-read and cache-write counts any event reported (native streams, whose counts are
   * cumulative): a later unusable count is billed at least this, as the client was shown it. Absent = none known.
   */
  peak?: ReportedPeak;
  /** True when the client received a whole message (message_stop); false when it got an error event. */
  complete: boolean;
  /** `now()` when the first output byte was produced. */
  firstByteAt?: number;
  /** Why the stream failed (for logs; already scrubbed of upstream secrets). */
  error?: string;
}

/**
 * The synchronous core of a stream decoder: upstream bytes in, client bytes out, no stream or promise of
 * its own, so that a relay can run a whole stream as one pull-based layer.
 */
export interface StreamTranscoder {
  /**
   * One upstream chunk → bytes for the client, in order (empty: nothing complete yet). Parts may be views of
   * the chunk (written as they are, not copied into one array). Never throws: an oversized event becomes the
   * error frame.
   */
  push(chunk: Uint8Array): Uint8Array[];
  /** The upstream body ended: the closing bytes (an `error` frame when it ended early). */
  end(): Uint8Array[];
  /** Reading the upstream failed: the `error` frame (the gateway's own words, never the upstream's). */
  fail(err: unknown): Uint8Array[];
  /** The client stream is complete (message ended, or an error frame sent): read no more upstream input. */
  readonly stopped: boolean;
  /**
   * The client has the message's last event (message_stop), though the upstream may not have closed yet
   * (a native stream is read to its close). Where a settlement commits later, its last byte is held back.
   */
  readonly messageEnded: boolean;
  /**
   * Nothing of the answer (its end, its usage) is missing any more, only the upstream's close (or `[DONE]`):
   * an upstream that keeps the connection open after that is closed by the relay rather than waited for.
   */
  readonly answerWhole: boolean;
  /**
   * The upstream has finished generating (OpenAI's finish_reason arrived): what it may still send (the usage
   * chunk, `[DONE]`) costs no more output, so a client that leaves now does not stop the read (stream-relay.ts).
   */
  readonly generated: boolean;
}

export interface StreamDecoder {
  /** The same decoding without a stream layer; use either this or `pipe`, not both. */
  readonly transcoder: StreamTranscoder;
  /**
   * Wraps the upstream body; the result is the Anthropic SSE byte stream for the client. An upstream that
   * fails or ends early yields an `event: error` frame, never a silently truncated stream. Cancelling the
   * result cancels the upstream body (and so the fetch).
   */
  pipe(upstream: ReadableStream<Uint8Array>): ReadableStream<Uint8Array>;
  result(): StreamResult;
}

/** Why an upstream call failed, for retry and health decisions. */
/** `model_limit`: the channel's upstream model cannot take the request as asked (its output cap); another channel may. */
export type UpstreamErrorKind = 'invalid_request' | 'too_large' | 'model_limit' | 'auth' | 'not_found' | 'rate_limit' | 'overloaded' | 'timeout' | 'server' | 'unreachable';

export interface ClassifiedError {
  /** True when another channel may succeed (only before the first byte reached the client). */
  retryable: boolean;
  kind: UpstreamErrorKind;
  /** The client-facing error: never the upstream's key, URL or raw auth message. */
  error: GatewayError;
  /**
   * A 404's own message, scrubbed: shown only if the relay judges the 404 the client's (an id the request named),
   * never while it stands for the channel's fault.
   */
  detail?: string;
}

export interface ProviderAdapter {
  /** The channel `type` this adapter serves. */
  readonly type: string;
  /** The upstream call for a Messages request; `body.model` is replaced by `target.upstreamModel`. */
  buildMessagesRequest(body: MessagesRequest, target: UpstreamTarget, clientHeaders: Headers): UpstreamRequest;
  /** A successful non-streaming upstream JSON body → Anthropic message. Throws GatewayError 502 on garbage. */
  decodeMessagesResponse(json: unknown, ctx: DecodeContext): DecodedMessage;
  /**
   * A successful non-streaming body forwarded as bytes when nothing in it needs translating (native
   * upstreams): the client's bytes and the reported usage, or null to decode it with `decodeMessagesResponse`.
   * `countsCalls`: the request offered a code-execution tool, whose calls are counted from the content.
   */
  passMessagesResponse?(bytes: Uint8Array, requestedModel: string, countsCalls?: boolean): PassedMessage | null;
  /** A decoder for one streamed answer. */
  createStreamDecoder(ctx: DecodeContext): StreamDecoder;
  /**
   * An upstream HTTP error (status >= 300; redirects are not followed) → retry decision and client-facing
   * error. Upstream text in the message goes through `scrubber` (the channel's, so its key never shows).
   * `sentMaxTokens`: the request's max_tokens as sent, for an output-cap refusal that states only the cap.
   */
  classifyError(status: number, bodyText: string, headers: Headers, scrubber?: Scrubber, sentMaxTokens?: number): ClassifiedError;
  /** The upstream call for count_tokens; absent when the upstream cannot count (use `estimateRequestTokens`). */
  buildCountTokensRequest?(body: CountTokensRequest, target: UpstreamTarget, clientHeaders: Headers): UpstreamRequest;
  /** count_tokens response → input tokens. */
  decodeCountTokens?(json: unknown): number;
  /** WebSocket URL of the upstream realtime endpoint; absent when the upstream has none. */
  realtimeUrl?(target: UpstreamTarget): string;
  /** Headers for the upstream realtime handshake. */
  realtimeHeaders?(target: UpstreamTarget): Record<string, string>;
}
