/**
 * Server-sent events: an incremental parser (bytes in any chunking → events) and an encoder.
 * Follows the WHATWG event-stream rules: \n, \r\n or \r line ends (also split across chunks), multi-line
 * `data` joined with \n, `:` comment lines ignored, an event dispatched at a blank line only if it has data.
 */
import type { AnthropicStreamEvent } from './anthropic/response';

export interface SseEvent {
  /** The `event:` field; undefined when absent (OpenAI streams send only `data:`). */
  event: string | undefined;
  data: string;
  id?: string;
}

/** Default cap of one event (see SseParser). */
export const DEFAULT_MAX_EVENT_CHARS = 1 << 20;

/** An upstream event grew past the parser's cap: the stream must end (its text is the gateway's own). */
export class SseEventTooLargeError extends Error {
  constructor(readonly limit: number) {
    super(`An upstream stream event exceeded ${limit} bytes.`);
    this.name = 'SseEventTooLargeError';
  }
}

/**
 * Linear in its input: only new text is scanned for line ends, and a line still in progress is kept as
 * pieces joined once when it ends (appending to one string and rescanning it made a 10 MB event cost
 * quadratic time). One event (its pending line plus its data lines) is capped at `maxEventChars`
 * characters of decoded text (= bytes for ASCII JSON); past it, `push` throws SseEventTooLargeError.
 */
export class SseParser {
  /** Made on the first bytes pushed: a parser fed decoded text (one per decoded event, raw-pipe.ts) never needs one. */
  private decoder: TextDecoder | null = null;
  /** Pieces of the line in progress (no line end seen yet) and their total length. */
  private pending: string[] = [];
  private pendingLen = 0;
  /** The previous chunk ended in \r: a \n starting the next one belongs to the same line end. */
  private skipLf = false;
  private event: string | undefined;
  private data: string[] = [];
  /** Characters held for the event in progress (data lines so far). */
  private eventLen = 0;
  private id: string | undefined;
  private first = true;

  constructor(private readonly maxEventChars = DEFAULT_MAX_EVENT_CHARS) {}

  /** Feeds bytes (or text); returns the events completed by them. */
  push(chunk: Uint8Array | string): SseEvent[] {
    let text = typeof chunk === 'string' ? chunk : (this.decoder ??= new TextDecoder()).decode(chunk, { stream: true });
    if (this.first && text.length) {
      this.first = false;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    if (this.skipLf && text.length) {
      this.skipLf = false;
      if (text.charCodeAt(0) === 10) text = text.slice(1);
    }
    const out: SseEvent[] = [];
    let start = 0;
    // Line ends are found with native indexOf (a charCodeAt loop in JS was the stream path's main cost).
    let nextLf = text.indexOf('\n');
    let nextCr = text.indexOf('\r');
    while (nextLf !== -1 || nextCr !== -1) {
      const i = nextCr === -1 || (nextLf !== -1 && nextLf < nextCr) ? nextLf : nextCr;
      let line = text.slice(start, i);
      if (this.pendingLen) {
        this.pending.push(line);
        line = this.pending.join('');
        this.pending = [];
        this.pendingLen = 0;
      }
      this.line(line, out);
      let next = i + 1;
      if (i === nextCr) {
        if (next < text.length) {
          if (text.charCodeAt(next) === 10) next++;
        } else this.skipLf = true;
      }
      // After a blank line, more blank lines change nothing: a run of them is skipped in one pass, not line by line
      // (a hostile upstream's megabytes of "\n" cost a slice, a call and two searches per byte).
      if (line === '' && next < text.length) next = this.skipBlank(text, next);
      start = next;
      if (nextLf !== -1 && nextLf < start) nextLf = text.indexOf('\n', start);
      if (nextCr !== -1 && nextCr < start) nextCr = text.indexOf('\r', start);
    }
    if (start < text.length) {
      const rest = start ? text.slice(start) : text;
      this.pending.push(rest);
      this.pendingLen += rest.length;
      if (this.eventLen + this.pendingLen > this.maxEventChars) throw new SseEventTooLargeError(this.maxEventChars);
    }
    return out;
  }

  /** Ends the input. A final event without its blank line is discarded, as the standard says. */
  end(): SseEvent[] {
    const rest = this.decoder?.decode() ?? '';
    const out = rest ? this.push(rest) : [];
    this.pending = [];
    this.pendingLen = 0;
    this.data = [];
    this.eventLen = 0;
    this.event = undefined;
    return out;
  }

  /** The end of the run of line ends starting at `from` (each one a blank line after a blank line: no effect). */
  private skipBlank(text: string, from: number): number {
    let i = from;
    let c = text.charCodeAt(i);
    while (c === 10 || c === 13) c = text.charCodeAt(++i);
    // Ended on a \r at the end of the text: a \n opening the next chunk is part of that line end.
    if (i === text.length && i > from && text.charCodeAt(i - 1) === 13) this.skipLf = true;
    return i;
  }

  private line(line: string, out: SseEvent[]): void {
    if (line === '') {
      if (this.data.length) {
        const ev: SseEvent = { event: this.event, data: this.data.join('\n') };
        if (this.id !== undefined) ev.id = this.id;
        out.push(ev);
      }
      this.event = undefined;
      this.data = [];
      this.eventLen = 0;
      return;
    }
    if (line.charCodeAt(0) === 58) return; // ':' comment
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    if (field === 'data') {
      this.eventLen += value.length + 1;
      if (this.eventLen > this.maxEventChars) throw new SseEventTooLargeError(this.maxEventChars);
      this.data.push(value);
    } else if (field === 'event') this.event = value;
    else if (field === 'id' && !value.includes('\0')) this.id = value;
  }
}

/** One SSE frame. Multi-line data is split into several `data:` lines. */
export function encodeSse(event: string | undefined, data: string): string {
  const head = event === undefined ? '' : `event: ${event}\n`;
  return `${head}data: ${data.includes('\n') ? data.split(/\r\n|\r|\n/).join('\ndata: ') : data}\n\n`;
}

/** The frame of an Anthropic stream event: its `type` is also the event name (A7). */
export function encodeAnthropicEvent(ev: AnthropicStreamEvent): string {
  return `event: ${ev.type}\ndata: ${JSON.stringify(ev)}\n\n`;
}

/** The `event: error` frame sent when a stream fails after its first byte. */
export function errorFrame(message: string, type = 'api_error'): string {
  return encodeAnthropicEvent({ type: 'error', error: { type, message } });
}
