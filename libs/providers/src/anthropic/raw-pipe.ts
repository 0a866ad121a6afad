/**
 * The Anthropic pass-through's fast path. Events the gateway does not change (content blocks, pings) go
 * out as the upstream's own bytes: found by scanning bytes for blank lines, forwarded as views of the
 * upstream chunk, never decoded and re-encoded. Only the other events (message_start, message_delta,
 * message_stop, error, anything unusual) are decoded and given to the machine. Decoding every event made
 * most of the stream path's CPU time and garbage, and garbage is what stalled the process when many
 * streams filled their sockets at once.
 *
 * A stream with any \r (other line ends) or a BOM falls back to the generic parser for its remainder.
 */
import { isAscii } from 'node:buffer';
import { DEFAULT_MAX_EVENT_CHARS, SseEventTooLargeError, SseParser, type SseEvent } from '@gw/formats';
import type { AnthropicStreamMachine } from './stream';
import { hasAsciiEscape } from './json-pass';

const LF = 10;
const CR = 13;
const enc = new TextEncoder();
/** Decodes whole events only (never `stream: true`), so it holds no state between calls and is shared by every stream. */
const dec = new TextDecoder();
const EVENT = enc.encode('event:');
/** Events forwarded byte for byte (content_block_delta also feeds the output estimate). */

function concat(parts: Uint8Array[], total: number): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  const out = new Uint8Array(total);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

const RAW_NAMES = ['content_block_delta', 'content_block_start', 'content_block_stop', 'ping'].map((n) => enc.encode(`${n}\n`));
const DELTA = 0;
const START = 1;
/**
 * A content_block_start naming one of these is decoded for the machine: a web search's results (billed per
 * search) or a code-execution call (`code_execution`, `bash_code_execution`, `text_editor_code_execution`: billed per call).
 */
const SEARCH_RESULT = Buffer.from('web_search_tool_result');
const CODE_EXECUTION = Buffer.from('code_execution');
/** A JSON string escape: `code\u005fexecution` is code_execution once parsed, so an event with one is decoded too. */
const ESCAPE = Buffer.from('\\u');
/**
 * An event that may carry usage (a `"usage"` key, or an ASCII character's escape, which could spell one) is
 * decoded for the machine whatever its name: a client reads a data's `type`, not the name (see mayCarryUsage).
 */
const USAGE_KEY = Buffer.from('"usage"');
/** So is one whose data may be a message_start (a client reads a second one by its `type`: see AnthropicStreamMachine.started). */
const START_TYPE = Buffer.from('"message_start"');
const mayCarryUsage = (b: Uint8Array) => {
  const buf = Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  return buf.includes(USAGE_KEY) || buf.includes(START_TYPE) || hasAsciiEscape(buf);
};
/**
 * So is one named otherwise whose data may be a content_block_start (a code-execution call, billed per call, that a
 * client reads by its `type`: see mayBeBlockStart in stream.ts); a content_block_start itself is checked by billedBlock.
 */
const BLOCK_START_TYPE = Buffer.from('"content_block_start"');
const mayBeBlockStart = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength).includes(BLOCK_START_TYPE);
const PIECE_KEYS = ['"text":"', '"partial_json":"', '"thinking":"'].map((k) => Buffer.from(k));
/** ChunkScan's needles, by index. */
const NEEDLES = [USAGE_KEY, START_TYPE, Buffer.from('\\u00'), BLOCK_START_TYPE, SEARCH_RESULT, CODE_EXECUTION, ESCAPE];
const [USAGE, MSG_START, U00, BLOCK_START, SEARCH, CODE, ESC] = [0, 1, 2, 3, 4, 5, 6] as const;

/** Which RAW_NAMES entry the event's `event:` line names (after blank lines), or -1. Compares bytes. */
function rawKind(ev: Uint8Array): number {
  let i = 0;
  while (i < ev.length && ev[i] === LF) i++;
  for (let k = 0; k < EVENT.length; k++) if (ev[i + k] !== EVENT[k]) return -1;
  let s = i + EVENT.length;
  if (ev[s] === 32) s++;
  next: for (let n = 0; n < RAW_NAMES.length; n++) {
    const name = RAW_NAMES[n]!;
    for (let k = 0; k < name.length; k++) if (ev[s + k] !== name[k]) continue next;
    return n;
  }
  return -1;
}

/**
 * Output tokens of the content_block_delta in `b[from, to)`, estimated from its bytes as estimateTextTokens would
 * from its text (CJK-range characters one token each, other characters a quarter), without decoding it. `ascii`:
 * the bytes are known to be ASCII (one native check per upstream chunk), so the count is the length; the
 * byte loop over every delta's text was most of a large stream's CPU time. Searched in place: a view per event
 * (a Buffer, a subarray) was most of a stream's garbage.
 */
function deltaTokens(b: Uint8Array, from: number, to: number, ascii: boolean): number {
  for (const key of PIECE_KEYS) {
    const at = lastIn(b, key, from, to);
    if (at === -1) continue;
    const end = b.lastIndexOf(34, to - 1); // the closing quote (the key found has quotes, so it is in the event)
    if (ascii) return end > at + key.length ? Math.ceil((end - at - key.length) / 4) : 0;
    let wide = 0;
    let chars = 0;
    for (let i = at + key.length; i < end; i++) {
      const c = b[i]!;
      if (c >= 0xe3 && c <= 0xef) wide++; // 3-byte sequences: the CJK ranges and their neighbours
      else if ((c & 0xc0) !== 0x80) chars++;
    }
    return wide + Math.ceil(chars / 4);
  }
  return 0;
}

/**
 * The last start of `key` (which begins with a quote) wholly inside `b[from, to)`, or -1; jumps quote to quote natively.
 * The walk stops at the event's first quote, found by a loop bounded by the event: a native backward search has no
 * lower bound, so an event without quotes (a hostile upstream's `data: 1` deltas) would otherwise search back
 * through the whole chunk, making a chunk of many such events quadratic.
 */
function lastIn(b: Uint8Array, key: Uint8Array, from: number, to: number): number {
  const last = to - key.length;
  if (last < from) return -1; // (a negative start would count from the array's end)
  let lo = from;
  while (lo <= last && b[lo] !== 34) lo++;
  if (lo > last) return -1;
  for (let i = b.lastIndexOf(34, last); i >= lo; i = i > lo ? b.lastIndexOf(34, i - 1) : -1) {
    let k = 1;
    while (k < key.length && b[i + k] === key[k]) k++;
    if (k === key.length) return i;
  }
  return -1;
}

/**
 * The needles the framer looks for in the events of one upstream chunk, searched in the chunk itself (one Buffer
 * view per chunk, not one per event): each needle's next occurrence is found once natively and kept while the
 * events before it are checked, so a chunk is scanned once per needle whatever its number of events.
 */
const EMPTY = Buffer.alloc(0);

class ChunkScan {
  private buf: Buffer = EMPTY;
  /** Per needle: the start of its next occurrence at or after the last event checked; -1 none left; -2 not searched. */
  private readonly next = new Int32Array(NEEDLES.length);

  reset(c: Uint8Array): void {
    this.buf = Buffer.from(c.buffer, c.byteOffset, c.byteLength);
    this.next.fill(-2);
  }

  /** Lets go of the chunk (an idle stream would otherwise pin its last upstream chunk until the next one). */
  clear(): void {
    this.buf = EMPTY;
  }

  /** Whether needle `n` lies wholly in `[from, to)` (the same answer as `includes` on the event's bytes). */
  has(n: number, from: number, to: number): boolean {
    let at = this.next[n]!;
    if (at === -1) return false;
    if (at < from) this.next[n] = at = this.buf.indexOf(NEEDLES[n]!, from);
    // The first occurrence at or after `from`: if it runs past `to`, every later one starts past it too.
    return at !== -1 && at + NEEDLES[n]!.length <= to;
  }

  /** mayCarryUsage of the event `[from, to)`; an event with `\u00` is checked exactly on a view of its own (rare). */
  mayCarryUsage(from: number, to: number): boolean {
    return this.has(USAGE, from, to) || this.has(MSG_START, from, to) || (this.has(U00, from, to) && hasAsciiEscape(this.buf.subarray(from, to)));
  }

  /** billedBlock of the event `[from, to)`. */
  billedBlock(from: number, to: number): boolean {
    return this.has(SEARCH, from, to) || this.has(CODE, from, to) || this.has(ESC, from, to);
  }
}

/** Whether a content_block_start event may open a billed block (see SEARCH_RESULT). */
function billedBlock(ev: Uint8Array): boolean {
  const b = Buffer.from(ev.buffer, ev.byteOffset, ev.byteLength);
  return b.includes(SEARCH_RESULT) || b.includes(CODE_EXECUTION) || b.includes(ESCAPE);
}

/** The data of one decoded event (its `data:` lines joined, as the parser would). */
function dataOf(text: string): string {
  return text.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(l[5] === ' ' ? 6 : 5)).join('\n');
}

/** Splits an upstream Anthropic SSE body into output chunks for the client, driving `machine`. */
export class AnthropicFramer {
  private pending: Uint8Array[] = [];
  private pendingLen = 0;
  /** The pending bytes end in \n (a blank line may complete across the chunk boundary). */
  private lastLf = false;
  private fallback: SseParser | null = null;
  private first = true;
  private readonly scan = new ChunkScan();

  constructor(private readonly machine: AnthropicStreamMachine, private readonly maxEvent = DEFAULT_MAX_EVENT_CHARS) {}

  /** One upstream chunk → bytes for the client (possibly empty). Throws SseEventTooLargeError. */
  push(c: Uint8Array): Uint8Array[] {
    if (this.fallback || c.indexOf(CR) !== -1 || (this.first && c[0] === 0xef)) return this.generic(c);
    this.first = false;
    const scan = this.scan;
    scan.reset(c);
    const out: Uint8Array[] = [];
    let runStart = -1;
    let runEnd = -1;
    const flushRun = () => {
      if (runStart !== -1) out.push(c.subarray(runStart, runEnd));
      runStart = -1;
    };
    let evStart = 0;
    let asciiChunk: boolean | null = null;
    // One native search per chunk: only a chunk holding a usage key or an escape has its events checked one by one.
    let usageChunk: boolean | null = null;
    let blockChunk: boolean | null = null;
    for (let i = c.indexOf(LF); i !== -1 && !this.machine.stopped; i = c.indexOf(LF, i + 1)) {
      if (i === evStart && this.pendingLen === 0) {
        // Blank lines between events: the whole run is skipped in one pass. Taken one by one, each pair was an
        // "event" of its own, decoded and parsed (4 MiB of "\n" took ~900 ms of one core, measured).
        let j = i + 1;
        while (c[j] === LF) j++;
        flushRun(); // dropped, as the parser would, so a forwarded run of events must end before them
        evStart = j;
        i = j - 1;
        continue;
      }
      const blank = i === evStart ? this.lastLf && this.pendingLen > 0 : c[i - 1] === LF;
      if (!blank) continue;
      const spans = this.pendingLen > 0;
      const ev = spans ? concat([...this.pending, c.subarray(evStart, i + 1)], this.pendingLen + i + 1 - evStart) : c.subarray(evStart, i + 1);
      this.pending = [];
      this.pendingLen = 0;
      this.lastLf = false;
      let kind = this.machine.complete ? -2 : rawKind(ev);
      // An event inside the chunk is searched in place (ChunkScan); one that spans chunks is a copy of its own.
      if (kind >= 0 && (spans ? mayCarryUsage(ev) : (usageChunk ??= mayCarryUsage(c)) && scan.mayCarryUsage(evStart, i + 1))) kind = -1;
      else if (kind >= 0 && kind !== START && (spans ? mayBeBlockStart(ev) : (blockChunk ??= mayBeBlockStart(c)) && scan.has(BLOCK_START, evStart, i + 1))) kind = -1;
      if (kind === -2) flushRun(); // after message_stop: dropped, like every other event then
      else if (kind !== -1) {
        if (kind === DELTA) {
          this.machine.addOutputEstimate(spans ? deltaTokens(ev, 0, ev.length, isAscii(ev)) : deltaTokens(c, evStart, i + 1, asciiChunk ??= isAscii(c)));
        } else if (kind === START && (spans ? billedBlock(ev) : scan.billedBlock(evStart, i + 1))) this.machine.blockStart(dataOf(dec.decode(ev)));
        // Stray blank lines before an event are dropped, as the parser would.
        let skip = 0;
        while (ev[skip] === LF) skip++;
        if (spans || skip) flushRun();
        if (spans) out.push(ev.subarray(skip));
        else {
          if (runStart === -1) runStart = evStart + skip;
          runEnd = i + 1;
        }
      } else {
        flushRun();
        const text = dec.decode(ev);
        for (const e of new SseParser(this.maxEvent).push(text)) {
          const o = this.machine.onEvent(e);
          if (o) out.push(enc.encode(o));
          if (this.machine.stopped) break;
        }
      }
      evStart = i + 1;
    }
    flushRun();
    scan.clear();
    if (!this.machine.stopped && evStart < c.length) {
      const rest = c.subarray(evStart);
      this.pending.push(rest);
      this.pendingLen += rest.length;
      this.lastLf = c[c.length - 1] === LF;
      if (this.pendingLen > this.maxEvent) throw new SseEventTooLargeError(this.maxEvent);
    }
    return out;
  }

  /** The body ended: a last event without its blank line is dropped, as the standard says. */
  end(): Uint8Array[] {
    if (!this.fallback) return [];
    return this.outOf(this.fallback.end());
  }

  private generic(c: Uint8Array): Uint8Array[] {
    if (!this.fallback) {
      this.fallback = new SseParser(this.maxEvent);
      const events = this.pending.length ? this.fallback.push(concat(this.pending, this.pendingLen)) : [];
      this.pending = [];
      this.pendingLen = 0;
      return [...this.outOf(events), ...this.outOf(this.fallback.push(c))];
    }
    return this.outOf(this.fallback.push(c));
  }

  private outOf(events: SseEvent[]): Uint8Array[] {
    let text = '';
    for (const e of events) {
      if (this.machine.stopped) break;
      text += this.machine.onEvent(e);
    }
    return text ? [enc.encode(text)] : [];
  }
}
