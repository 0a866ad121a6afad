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

export class SseParser {
  private readonly decoder = new TextDecoder();
  private buf = '';
  /** The previous chunk ended in \r: a \n starting the next one belongs to the same line end. */
  private skipLf = false;
  private event: string | undefined;
  private data: string[] = [];
  private id: string | undefined;
  private first = true;

  /** Feeds bytes (or text); returns the events completed by them. */
  push(chunk: Uint8Array | string): SseEvent[] {
    let text = typeof chunk === 'string' ? chunk : this.decoder.decode(chunk, { stream: true });
    if (this.first && text.length) {
      this.first = false;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    if (this.skipLf && text.length) {
      this.skipLf = false;
      if (text[0] === '\n') text = text.slice(1);
    }
    this.buf += text;
    const out: SseEvent[] = [];
    let start = 0;
    const buf = this.buf;
    for (let i = 0; i < buf.length; i++) {
      const c = buf.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      this.line(buf.slice(start, i), out);
      if (c === 13) {
        if (i + 1 < buf.length) {
          if (buf.charCodeAt(i + 1) === 10) i++;
        } else this.skipLf = true;
      }
      start = i + 1;
    }
    this.buf = buf.slice(start);
    return out;
  }

  /** Ends the input. A final event without its blank line is discarded, as the standard says. */
  end(): SseEvent[] {
    const rest = this.decoder.decode();
    const out = rest ? this.push(rest) : [];
    this.buf = '';
    this.data = [];
    this.event = undefined;
    return out;
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
      return;
    }
    if (line.charCodeAt(0) === 58) return; // ':' comment
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
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
