/**
 * An upper bound on the conversation a realtime response reads, from what the relay saw pass: the input
 * a response cut before its `response.done` is billed on (the upstream reports no usage for it, yet it
 * charged the operator for reading the context).
 *
 * A session's upstream conversation starts empty and everything in it came through the relay:
 * - client events (items, instructions, tools, a response's own `input`): a byte-level BPE token covers at
 *   least one byte, so a frame's UTF-8 bytes bound the tokens of the text it carries (escapes only add bytes);
 * - appended input audio (`input_audio_buffer.append`): its duration at the densest input format the session
 *   named or confirmed, counted at AUDIO_TOKENS_PER_SECOND (OpenAI counts user audio at 10 a second and
 *   assistant audio at 20: the larger is used for both, a margin of two on user audio);
 * - audio inside any other client event (an item's `input_audio`/`output_audio` content: a string under an
 *   `audio` key): counted as appended audio, not as text bytes. The upstream reads it as audio tokens at the
 *   audio price; as text its base64 bytes, capped at the window, bill the window at the text price, while the
 *   upstream may bill the window at the (eight times) dearer audio price;
 * - the upstream's own defaults (instructions, tools): in `session.created`/`session.updated`, bounded by
 *   the largest such frame's bytes;
 * - earlier responses' output: as their `response.done` reported it (else their max output); an unfinished
 *   response started before the cut one may have finished upstream unseen, so it counts at its max output;
 * - formatting the relay cannot see: SESSION_OVERHEAD_TOKENS, plus ITEM_OVERHEAD_TOKENS per item the
 *   upstream announced (`conversation.item.created`/`added`).
 * Content whose tokens do not follow from its bytes makes the bound unknown (the whole context window is billed,
 * at the dearer input price):
 * images (a tiny image file can cost a thousand tokens), item references (one item read many times), a
 * stored prompt (a `prompt` object: text held upstream), MCP tools (results the upstream fetches itself). A binary
 * frame that does not start like JSON is not read (session.ts): OpenAI's Realtime API takes only text events.
 */
import { jsonDepthWithin } from '@gw/core';
import { CLIENT_EVENT_MAX_DEPTH } from './events';
import { ok as isCount } from './usage';

/** The densest audio token rate OpenAI bills (assistant audio, one per 50 ms). */
export const AUDIO_TOKENS_PER_SECOND = 20;
export const SESSION_OVERHEAD_TOKENS = 1024;
export const ITEM_OVERHEAD_TOKENS = 16;

const PCM16_24K = 48_000;
const G711 = 8_000;
const APPEND_PREFIX = '{"type":"input_audio_buffer.append"';
const ITEM_PREFIXES = ['{"type":"conversation.item.created"', '{"type":"conversation.item.added"'];
/** Markers of content whose tokens its bytes do not bound (see above). A `prompt` is checked apart: a transcription's is plain text. */
const UNSIZED = ['input_image', 'image_url', 'item_reference', '"mcp"', 'server_url', 'connector_id'];

/** A stored prompt reference (`{ id, version, variables }`): text held upstream. */
const storedPrompt = (p: unknown): boolean => !!p && typeof p === 'object';

/** Bytes per second of an input audio format a session object names (GA `audio.input.format`, beta `input_audio_format`), or undefined. */
export function inputAudioRate(session: any): number | undefined {
  const ga = session?.audio?.input?.format;
  const kind = typeof ga === 'object' && ga ? ga.type : session?.input_audio_format;
  if (typeof kind !== 'string') return undefined;
  if (/pcmu|pcma|g711/.test(kind)) return G711;
  const rate = typeof ga?.rate === 'number' && ga.rate > 0 ? ga.rate : 24_000;
  return 2 * rate;
}

/** A client frame, parsed at most once: null when it is not JSON (the upstream reads nothing from it), DEEP when nested too deep to read. */
const DEEP = Symbol('deep');
class Frame {
  private event: any;
  /** Only `\u` can spell a letter of a key or marker another way. */
  readonly escaped: boolean;
  constructor(readonly text: string) {
    this.escaped = text.includes('\\u');
  }

  parsed(): any {
    if (this.event === undefined) {
      // Past the depth the meter reads, a frame is not parsed (a deep one could overflow the stack here).
      if (!jsonDepthWithin(this.text, CLIENT_EVENT_MAX_DEPTH)) this.event = DEEP;
      else {
        try {
          this.event = JSON.parse(this.text);
        } catch {
          this.event = null;
        }
      }
    }
    return this.event;
  }
}

/** Whether a frame carries content its bytes do not bound; an escape may spell a marker, so such a frame is read unescaped. */
function unsized(f: Frame): boolean {
  let t = f.text;
  if (f.escaped) {
    const event = f.parsed();
    if (event === null) return false;
    // Too deep to read (the meter refuses such a frame, so this only overstates): no marker can be ruled out.
    if (event === DEEP) return true;
    t = JSON.stringify(event);
  }
  if (UNSIZED.some((m) => t.includes(m))) return true;
  const event = t.includes('"prompt"') ? f.parsed() : null;
  return !!event && event !== DEEP && (storedPrompt(event.session?.prompt) || storedPrompt(event.response?.prompt));
}

/**
 * The `"audio": "…"` strings as written in a frame: their total length (escapes included). A scan, not a parse:
 * every occurrence counts, so a duplicate key cannot hide one from an upstream that keeps the first, and a large
 * item is not parsed. Outside a string a `"audio"` can only be a key or a value (a quote inside a string is escaped).
 */
function rawAudioChars(text: string): number {
  let chars = 0;
  let from = 0;
  for (let at = text.indexOf('"audio"'); at !== -1; at = text.indexOf('"audio"', from)) {
    let i = at + 7;
    from = i;
    while (WS.has(text.charCodeAt(i))) i++;
    if (text[i++] !== ':') continue;
    while (WS.has(text.charCodeAt(i))) i++;
    if (text[i] !== '"') continue;
    const end = closingQuote(text, i + 1);
    chars += end - i - 1;
    from = end + 1;
  }
  return chars;
}
const WS = new Set([0x20, 0x09, 0x0a, 0x0d]);

/** The index of the quote closing a string whose body starts at `from` (one not escaped), else the text's length. */
function closingQuote(text: string, from: number): number {
  for (let q = text.indexOf('"', from); q !== -1; q = text.indexOf('"', q + 1)) {
    let k = q - 1;
    while (k >= from && text.charCodeAt(k) === 0x5c) k--;
    if ((q - 1 - k) % 2 === 0) return q;
  }
  return text.length;
}

/** The characters of every string under an `audio` key of a parsed event, found by a walk with no recursion. */
function parsedAudioChars(event: unknown): number {
  let chars = 0;
  const stack: unknown[] = [event];
  while (stack.length) {
    const v = stack.pop();
    if (!v || typeof v !== 'object') continue;
    if (Array.isArray(v)) {
      for (const x of v) if (x && typeof x === 'object') stack.push(x);
      continue;
    }
    for (const [k, x] of Object.entries(v)) {
      if (k === 'audio' && typeof x === 'string') chars += x.length;
      else if (x && typeof x === 'object') stack.push(x);
    }
  }
  return chars;
}

/**
 * Base64 audio a frame carries outside an append (an item's audio content, GA or beta): `chars` counted as audio,
 * `written` of the frame's characters that are those strings (no longer counted as text). An escaped key is found
 * only by the parse: its string then stays counted as text as well (an escape only overstates); a frame too deep
 * to parse counts whole as audio.
 */
function inlineAudio(f: Frame): { chars: number; written: number } {
  if (!f.escaped) {
    const written = f.text.includes('"audio"') ? rawAudioChars(f.text) : 0;
    return { chars: written, written };
  }
  const written = rawAudioChars(f.text);
  const event = f.parsed();
  if (event === DEEP) return { chars: Math.max(written, f.text.length), written };
  return { chars: Math.max(written, event && typeof event === 'object' ? parsedAudioChars(event) : 0), written };
}

/** The input a response can have read, split by the price it is billed at (`either`: text or audio, not known which). */
export interface ContextTokens { text: number; audio: number; either: number; known: boolean }

/**
 * The input tokens a cut response is billed: within the context window, the dearer kind filled first (so
 * the window's clamp never drops the dearer tokens); an unknown bound bills the whole window at the dearer
 * of the text and audio input prices (what the response's hold was sized on).
 */
export function inputEstimate(c: ContextTokens, window: number, price: { input: number; audioInput: number }): { input: number; audioInput: number } {
  const audioDearer = price.audioInput >= price.input;
  if (!c.known) return audioDearer ? { input: 0, audioInput: window } : { input: window, audioInput: 0 };
  const dear = Math.min(window, (audioDearer ? c.audio : c.text) + c.either);
  const cheap = Math.min(window - dear, audioDearer ? c.text : c.audio);
  return audioDearer ? { input: cheap, audioInput: dear } : { input: dear, audioInput: cheap };
}

export class ConversationBound {
  private textBytes = 0;
  private sessionBytes = 0;
  private audioBytes = 0;
  /** Audio appended since the upstream last committed or cleared its buffer (what its next commit can hold). */
  tailBytes = 0;
  private items = 0;
  private textOut = 0;
  private audioOut = 0;
  private unknown = false;
  /** Bytes per second of input audio: the densest format the session named or the upstream confirmed. */
  audioRate = PCM16_24K;

  /** A client text frame, forwarded or not (counting one the relay refused only overstates). */
  client(text: string): void {
    if (text.startsWith(APPEND_PREFIX) && !text.includes('"type"', APPEND_PREFIX.length) && !text.includes('\\', APPEND_PREFIX.length)) {
      // The whole frame as if it were base64 audio: never less than the audio field, and no field to misread.
      const bytes = Math.floor((text.length * 3) / 4);
      this.audioBytes += bytes;
      this.tailBytes += bytes;
      return;
    }
    const f = new Frame(text);
    // Audio in an item: as audio (its base64 length, like an append's), the rest of the frame as text.
    const inline = inlineAudio(f);
    const audio = Math.floor((inline.chars * 3) / 4);
    this.audioBytes += audio;
    // An append the fast path could not take (keys in another order, an escape) fills the buffer all the same.
    if (audio && (f.escaped || text.includes('input_audio_buffer.append')) && f.parsed()?.type === 'input_audio_buffer.append') this.tailBytes += audio;
    this.textBytes += Buffer.byteLength(text) - inline.written;
    if (!this.unknown && unsized(f)) this.unknown = true;
  }

  /** A session object a client update names or the upstream confirms: the densest input format wins. */
  session(session: unknown, frameBytes = 0, upstream = false): void {
    const rate = inputAudioRate(session);
    if (rate !== undefined) this.audioRate = Math.min(this.audioRate, rate);
    if (!upstream) return;
    this.sessionBytes = Math.max(this.sessionBytes, frameBytes);
    const s = session as any;
    if (s && typeof s === 'object' && (storedPrompt(s.prompt) || (Array.isArray(s.tools) && s.tools.some((t: any) => t?.type === 'mcp')))) this.unknown = true;
  }

  /** An upstream frame: counts the items it adds to the conversation (a prefix test, nothing parsed). */
  upstream(text: string): void {
    if (ITEM_PREFIXES.some((p) => text.startsWith(p))) this.items++;
  }

  /** A finished response's output, as reported (an unusable count: its max output), which later responses read. */
  output(textOut: number, audioOut: number, maxOutput: number): void {
    const t = isCount(textOut) ? Math.min(textOut, maxOutput) : maxOutput;
    const a = isCount(audioOut) ? Math.min(audioOut, maxOutput) : maxOutput;
    this.textOut += t;
    this.audioOut += a;
  }

  /** Seconds of input audio `bytes` can hold at the session's densest format. */
  seconds(bytes: number): number {
    return bytes / this.audioRate;
  }

  /**
   * The bound on a cut response's input, `running` being the max outputs of the other responses that may
   * have finished upstream unseen (read back as text or audio: billed at the dearer).
   */
  bound(running: number): ContextTokens {
    const audio = Math.ceil(this.seconds(this.audioBytes) * AUDIO_TOKENS_PER_SECOND) + this.audioOut;
    const text = SESSION_OVERHEAD_TOKENS + this.items * ITEM_OVERHEAD_TOKENS + this.textBytes + this.sessionBytes + this.textOut;
    return { text, audio, either: running, known: !this.unknown };
  }
}
