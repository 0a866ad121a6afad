/**
 * A stream whose first event is an error: OpenAI-compatible servers (OpenRouter when its provider fails) and
 * Anthropic (`event: error`, overloaded) answer 200 and then only an error. Nothing has reached the client at
 * that point, so it is judged like the HTTP status its type stands for (fails over, counts against health),
 * instead of being relayed as a 200 holding an `error` event where another channel could have answered.
 */
import { SseParser, type SseEvent } from '@gw/formats';
import type { ClassifiedError } from './adapter';
import { classifyUpstreamError } from './errors';
import type { Scrubber } from './scrubber';

/**
 * The HTTP status an upstream's error type stands for (as Anthropic sends them). OpenRouter states the status as a
 * number in `code` (its provider's answer, after 200 and keep-alive comments went out), read when the type is none of
 * these. Anything else is a 500. The client's own errors keep their 4xx: read as 500, a request the upstream refused (too long for the
 * model, a bad parameter) counted against the health of every channel it then failed over to.
 */
const STATUS_OF: Record<string, number> = {
  overloaded_error: 529, rate_limit_error: 429, timeout_error: 504, api_error: 500, invalid_request_error: 400,
  authentication_error: 401, billing_error: 402, permission_error: 403, not_found_error: 404, request_too_large: 413,
};
const statusOf = (error: { type?: unknown; code?: unknown }): number => {
  if (typeof error.type === 'string' && Object.hasOwn(STATUS_OF, error.type)) return STATUS_OF[error.type]!;
  if (typeof error.code === 'number' && Number.isInteger(error.code) && error.code >= 400 && error.code <= 599) return error.code;
  return 500;
};

const isPing = (e: SseEvent) => e.event === 'ping' || /^\s*\{\s*"type"\s*:\s*"ping"\s*\}\s*$/.test(e.data);

/**
 * Whether a stream begins with an error, read as its bytes come: the first event with data (pings and comments
 * skipped) decides. It is an error object (OpenAI `{"error":{…}}`, with or without choices; Anthropic
 * `{"type":"error","error":{…}}`) or not. Fed chunk by chunk, since that event may come after keep-alive comments
 * (OpenRouter's `: OPENROUTER PROCESSING`) or be split across chunks; judged on the first chunk alone, such a stream
 * was committed and its error relayed as a 200. `scrubber` is a getter: the channel's scrubber is built only for an error.
 */
export class StreamStartJudge {
  /** Built on the first chunk the fast path cannot decide: almost every stream never needs one. */
  private parser: SseParser | undefined;
  private verdict: ClassifiedError | null | undefined;
  private fed = false;

  constructor(private readonly scrubber?: () => Scrubber) {}

  /** The verdict once known (null: the stream starts fine), else undefined: more bytes are needed. */
  push(chunk: Uint8Array): ClassifiedError | null | undefined {
    if (this.verdict !== undefined) return this.verdict;
    // Almost every stream's first chunk begins with a plain data event: decided by a prefix check, without
    // running the SSE parser over it (the common case stays at well under a microsecond per stream).
    if (!this.fed && plainFirstEvent(chunk)) return (this.verdict = null);
    this.fed = true;
    let events: SseEvent[];
    try {
      events = (this.parser ??= new SseParser()).push(chunk);
    } catch {
      return (this.verdict = null); // an oversized event: the stream's own reader refuses it
    }
    return this.judge(events);
  }

  /**
   * The stream ended: decided on what it holds (an event without its blank line is discarded, as the stream reader
   * does); undefined when it held no event with data at all (comments and pings only): an empty stream.
   */
  end(): ClassifiedError | null | undefined {
    if (this.verdict !== undefined) return this.verdict;
    return this.judge(this.parser?.end() ?? []);
  }

  private judge(events: SseEvent[]): ClassifiedError | null | undefined {
    const ev = events.find((e) => e.data !== '' && !isPing(e));
    if (!ev) return undefined;
    return (this.verdict = errorOf(ev.data, this.scrubber));
  }
}

/**
 * Whether a chunk begins with a whole event that is plainly no error: one JSON data line (OpenAI's chunks), or
 * Anthropic's `message_start`, up to the blank line, mentioning neither an error nor a ping. Anything else (a
 * comment first, CR line ends, an event not whole yet) is left to the parser.
 */
const PLAIN_START = /^(?:event: ?message_start\n)?data: ?\{[^\r\n]*\n\n/;
function plainFirstEvent(chunk: Uint8Array): boolean {
  const b = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  const end = b.indexOf('\n\n');
  if (end < 0) return false;
  const head = b.toString('latin1', 0, end + 2);
  return PLAIN_START.test(head) && !head.includes('"error"') && !head.includes('ping');
}

/** The classified error an event's data is, else null. */
function errorOf(data: string, scrubber?: () => Scrubber): ClassifiedError | null {
  // Cheap test first: almost every stream's first event never mentions an error.
  if (!data.includes('"error"')) return null;
  let j: unknown;
  try {
    j = JSON.parse(data);
  } catch {
    return null;
  }
  return errorBodyOf(j, scrubber) ?? failedChunk(j, scrubber);
}

/**
 * An OpenAI-compatible chunk the stream decoder ends the answer on (OpenAIStreamMachine: an `error` that is no
 * error object, or a choice finishing with "error", OpenRouter's shape without its error member) read as an upstream
 * 500. As the first event, such a chunk was committed: the client got a 200 holding only an `error` event, no
 * failover, and the channel's health never heard of it.
 */
function failedChunk(j: unknown, scrubber?: () => Scrubber): ClassifiedError | null {
  const c = j as { type?: unknown; error?: unknown; choices?: unknown } | null;
  if (!c || typeof c !== 'object' || c.type !== undefined) return null;
  const failed = !!c.error || (Array.isArray(c.choices) && c.choices.some((x) => (x as { finish_reason?: unknown } | null)?.finish_reason === 'error'));
  return failed ? classifyUpstreamError(500, '', new Headers(), scrubber?.()) : null;
}

/**
 * The classified error a decoded body is (an OpenAI `{"error":{…}}` or Anthropic `{"type":"error","error":{…}}`), else
 * null. Also read from a 200 JSON answer: some servers and proxies answer errors with 200, and read as a bad answer
 * (502) the client's own 400 (too long for the model) failed over to every channel and counted against each one's health.
 */
export function errorBodyOf(j: unknown, scrubber?: () => Scrubber): ClassifiedError | null {
  const b = j as { type?: unknown; error?: { type?: unknown; code?: unknown } } | null;
  if (!b || typeof b !== 'object' || !b.error || typeof b.error !== 'object' || (b.type !== undefined && b.type !== 'error')) return null;
  // The error object is read as an HTTP error body: its message for a 400 (context window wording), type/code for a 429.
  return classifyUpstreamError(statusOf(b.error), JSON.stringify({ error: b.error }), new Headers(), scrubber?.());
}
