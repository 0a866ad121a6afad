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
 * Whether a stream begins with an error, read as its bytes come: the first event that shows the client something
 * decides. Pings, comments and events that show nothing (`message_start`; an OpenAI role-only delta, `choices: []`,
 * `{}`) are read past: the gateway commits the 200 and its own `message_start` on such an event, so an error right
 * after it reached the client as a 200 ending in an `error` event, with no failover. An error object (OpenAI
 * `{"error":{…}}`, with or without choices; Anthropic `{"type":"error","error":{…}}`) decides for an error, any other
 * event for the stream. Fed chunk by chunk, since that event may come after keep-alive comments (OpenRouter's
 * `: OPENROUTER PROCESSING`) or be split across chunks. The caller bounds how long it reads (an upstream sending
 * nothing but empty events is committed at the bound, as it would have been before). `scrubber` is a getter: the
 * channel's scrubber is built only for an error.
 */
export class StreamStartJudge {
  /** Built on the first chunk the fast path cannot read whole: almost every stream never needs one. */
  private parser: SseParser | undefined;
  private verdict: ClassifiedError | null | undefined;

  constructor(private readonly scrubber?: () => Scrubber) {}

  /** The verdict once known (null: the stream starts fine), else undefined: more bytes are needed. */
  push(chunk: Uint8Array): ClassifiedError | null | undefined {
    if (this.verdict !== undefined) return this.verdict;
    let rest = chunk;
    if (!this.parser) {
      // Whole events at the start of a chunk are read without the SSE parser: a native stream's events are decided by
      // their names (no JSON read), an OpenAI chunk by its data; what the fast path cannot read goes to the parser.
      let used = 0;
      for (const { event, end } of plainEvents(chunk)) {
        const v = this.decide(event);
        if (v !== undefined) return v;
        used = end;
      }
      if (used === chunk.byteLength) return undefined;
      rest = chunk.subarray(used);
    }
    let events: SseEvent[];
    try {
      events = (this.parser ??= new SseParser()).push(rest);
    } catch {
      return (this.verdict = null); // an oversized event: the stream's own reader refuses it
    }
    return this.judge(events);
  }

  /**
   * The stream ended: decided on what it holds (an event without its blank line is discarded, as the stream reader
   * does); undefined when it held nothing that shows the client anything (comments, pings, empty events): an empty stream.
   */
  end(): ClassifiedError | null | undefined {
    if (this.verdict !== undefined) return this.verdict;
    return this.judge(this.parser?.end() ?? []);
  }

  private judge(events: SseEvent[]): ClassifiedError | null | undefined {
    for (const ev of events) {
      const v = this.decide(ev);
      if (v !== undefined) return v;
    }
    return undefined;
  }

  /** An event's verdict, or undefined when it shows the client nothing (read on). */
  private decide(ev: SseEvent): ClassifiedError | null | undefined {
    if (ev.data === '' || isPing(ev)) return undefined;
    // Cheap tests first: a native event is known by its name, and almost no event mentions an error.
    const errorWord = ev.data.includes('"error"');
    if (ev.event !== undefined && !errorWord) return ev.event === 'message_start' ? undefined : (this.verdict = null);
    let j: unknown;
    try {
      j = JSON.parse(ev.data);
    } catch {
      return (this.verdict = null); // `[DONE]`, or no JSON: the stream's own reader deals with it
    }
    const error = errorWord ? errorBodyOf(j, this.scrubber) ?? failedChunk(j, this.scrubber) : null;
    if (error) return (this.verdict = error);
    return showsNothing(j) ? undefined : (this.verdict = null);
  }
}

/**
 * The whole events a chunk begins with, one at a time (the first with content ends the reading), each one JSON data
 * line with an optional event name (OpenAI's chunks, Anthropic's events) up to its blank line, with the offset past
 * it. Anything else (a comment, CR line ends, an event not whole yet, a BOM) ends them: the rest is left to the parser.
 */
const PLAIN_EVENT = /^(?:event: ?([A-Za-z_]+)\n)?data: ?(\{[^\r\n]*)\n\n/;
function* plainEvents(chunk: Uint8Array): Generator<{ event: SseEvent; end: number }> {
  const b = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  for (let at = 0; ;) {
    const end = b.indexOf('\n\n', at);
    if (end < 0) return;
    // latin1: one char per byte, so lengths are byte offsets. A named event without an error is judged by its name
    // alone (never parsed), so its data is not decoded again as UTF-8.
    const m = PLAIN_EVENT.exec(b.toString('latin1', at, end + 2));
    if (!m) return;
    const named = m[1] !== undefined && !m[2]!.includes('"error"');
    yield { event: { event: m[1], data: named ? m[2]! : b.toString('utf8', end - m[2]!.length, end) }, end: end + 2 };
    at = end + 2;
  }
}

/**
 * Whether a decoded event shows the client nothing: Anthropic's `message_start` or a ping, or an OpenAI chunk with
 * no usage and no choice holding anything but a role or empty fields (a role-only delta, `choices: []`, `{}`).
 * Anything else (text, reasoning, a tool call, a refusal, a finish reason, usage, a field unknown here) decides.
 */
function showsNothing(j: unknown): boolean {
  if (!j || typeof j !== 'object' || Array.isArray(j)) return false;
  const c = j as { type?: unknown; usage?: unknown; choices?: unknown };
  if (c.type !== undefined) return c.type === 'message_start' || c.type === 'ping';
  if (c.usage !== undefined && c.usage !== null) return false;
  if (c.choices === undefined) return true;
  return Array.isArray(c.choices) && c.choices.every(emptyChoice);
}

function emptyChoice(x: unknown): boolean {
  if (!x || typeof x !== 'object') return false;
  const c = x as { finish_reason?: unknown; delta?: unknown };
  if (c.finish_reason !== undefined && c.finish_reason !== null) return false;
  if (c.delta === undefined || c.delta === null) return true;
  if (typeof c.delta !== 'object' || Array.isArray(c.delta)) return false;
  return Object.entries(c.delta).every(([k, v]) => k === 'role' || v === null || v === '' || (Array.isArray(v) && !v.length));
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
