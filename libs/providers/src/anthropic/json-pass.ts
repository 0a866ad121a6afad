/**
 * A native Anthropic JSON answer forwarded as the upstream's bytes. Parsing the whole body only to
 * replace `model` and read `usage`, then serialising it again, was most of the JSON answer's own cost
 * and grows with the answer. Instead the head is scanned up to `content` (id, type, role, model are
 * plain strings before it in every Anthropic answer) and `usage` is read from the tail, where Anthropic
 * puts it as the last member. Anything unexpected returns null and the caller decodes the body fully, so
 * an odd but valid answer is still served, and an invalid one still fails over.
 */
import type { Usage } from '@gw/formats';
import type { PassedMessage } from '../adapter';

const Q = 0x22; // "
const BS = 0x5c; // \
const isWs = (c: number) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
const USAGE_KEY = Buffer.from('"usage"');
/** In every code-execution call's name (code_execution, bash_code_execution, text_editor_code_execution). */
const CODE_EXECUTION = Buffer.from('code_execution');
/**
 * A JSON string escape (`\u005f`): an upstream may spell any character of a name with one, so a call named
 * `code\u005fexecution` (code_execution once parsed) has no "code_execution" in its bytes. Such an answer is decoded.
 */
const ESCAPE = Buffer.from('\\u');
const U00 = Buffer.from('\\u00');
const KEY_ESCAPES = ['\\u004', '\\u005', '\\u006', '\\u007'].map((k) => Buffer.from(k));
/**
 * Whether the bytes hold an escape of an ASCII character that may spell a key (`\u0040` to `\u007f`: the letters
 * and `_` of every key the scans look for). Escapes below it (control characters, `\u003c` `\u003e` `\u0026` as Go's
 * encoding/json writes `<` `>` `&`) spell no key letter: an honest answer relayed by a Go proxy keeps its bytes.
 */
export function hasAsciiEscape(b: Buffer): boolean {
  // One native search each, not a loop over every `\u00`: a Go-escaped answer has thousands of them.
  return b.includes(U00) && KEY_ESCAPES.some((k) => b.includes(k));
}
/** Fields scanned in the head before giving up (Anthropic has four before `content`). */
const MAX_HEAD_FIELDS = 16;
const COUNT_KEYS = ['input_tokens', 'output_tokens', 'cache_creation_input_tokens', 'cache_read_input_tokens'] as const;

/** The end (index after the closing quote) of the JSON string starting at `i` (its opening quote), or -1. */
function stringEnd(b: Buffer, i: number): number {
  // Native search for the closing quote; one preceded by an odd run of backslashes is escaped.
  for (let j = b.indexOf(Q, i + 1); j >= 0; j = b.indexOf(Q, j + 1)) {
    let k = j - 1;
    while (b[k] === BS) k--;
    if ((j - 1 - k) % 2 === 0) return j + 1;
  }
  return -1;
}

function skipWs(b: Buffer, i: number): number {
  while (i < b.length && isWs(b[i]!)) i++;
  return i;
}

const TYPE = Buffer.from('"type"');
const MODEL = Buffer.from('"model"');
const CONTENT = Buffer.from('"content"');
const MESSAGE = Buffer.from('"message"');
/** Whether b[from, to) is exactly `word` (no string is built: this runs for every head field). */
const is = (b: Buffer, from: number, to: number, word: Buffer) => to - from === word.length && b.compare(word, 0, word.length, from, to) === 0;

/** Where the `model` string value is (quotes included), if the head is id/type/role/model strings up to `content: [`, type "message". */
function scanHead(b: Buffer): { modelStart: number; modelEnd: number } | null {
  let i = skipWs(b, 0);
  if (b[i] !== 0x7b) return null; // {
  i++;
  let model: { modelStart: number; modelEnd: number } | null = null;
  let isMessage = false;
  let sawType = false;
  for (let n = 0; n < MAX_HEAD_FIELDS; n++) {
    i = skipWs(b, i);
    if (b[i] !== Q) return null;
    const keyEnd = stringEnd(b, i);
    if (keyEnd < 0) return null;
    // A key written with escapes (`mod\u0065l` is `model` too) goes the slow way.
    const keyStart = i;
    for (let j = keyStart + 1; j < keyEnd - 1; j++) if (b[j] === BS) return null;
    i = skipWs(b, keyEnd);
    if (b[i] !== 0x3a) return null; // :
    i = skipWs(b, i + 1);
    if (is(b, keyStart, keyEnd, CONTENT)) return b[i] === 0x5b && isMessage && model ? model : null; // [
    if (b[i] !== Q) return null;
    const valueEnd = stringEnd(b, i);
    if (valueEnd < 0) return null;
    if (is(b, keyStart, keyEnd, TYPE)) {
      if (sawType) return null; // spelled twice: parsers disagree on which one is the answer's type
      sawType = true;
      isMessage = is(b, i, valueEnd, MESSAGE);
    }
    else if (is(b, keyStart, keyEnd, MODEL)) {
      if (model) return null; // spelled twice: decoded, so no parser can read the upstream's model name
      model = { modelStart: i, modelEnd: valueEnd };
    }
    i = skipWs(b, valueEnd);
    if (b[i] !== 0x2c) return null; // ,
    i++;
  }
  return null;
}

/**
 * `usage`, when it is the body's last member: the last `"usage"` key followed by an object that runs up
 * to the body's closing brace. Inside a JSON string a quote is escaped, so `"usage"` with a colon after
 * it and the closing brace right after its object can only be that member of the outermost object.
 */
function scanTail(buf: Buffer): Usage | null {
  let end = buf.length - 1;
  while (end >= 0 && isWs(buf[end]!)) end--;
  if (buf[end] !== 0x7d) return null; // }
  const k = buf.lastIndexOf(USAGE_KEY);
  if (k <= 0 || buf[k - 1] === BS) return null;
  // A second `usage` key (duplicate members are read first-wins by some parsers, last-wins by others, refused by
  // strict ones) goes the slow way, which serialises one: the client reads exactly the usage that is billed.
  if (buf.indexOf(USAGE_KEY) !== k) return null;
  let i = skipWs(buf, k + USAGE_KEY.length);
  if (buf[i] !== 0x3a) return null;
  i = skipWs(buf, i + 1);
  if (buf[i] !== 0x7b) return null;
  let u: unknown;
  try {
    u = JSON.parse(buf.toString('utf8', i, end));
  } catch {
    return null;
  }
  if (!u || typeof u !== 'object' || Array.isArray(u)) return null;
  // Every count a non-negative safe integer: anything else is for the full decoder's normalisation.
  for (const key of COUNT_KEYS) {
    const v = (u as Record<string, unknown>)[key];
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) return null;
  }
  return u as Usage;
}

/**
 * Below this size a full parse and re-serialisation is as cheap as the scans (measured: break-even near
 * 1 KB; 4 KB answers 2-5x cheaper passed through, 40 KB ones 5-10x), so short answers are decoded.
 */
export const PASS_MIN_BYTES = 1024;

/**
 * The answer to forward as bytes, or null when it must be decoded (see the module comment). `countsCalls`: the
 * request offered a code-execution tool, so the answer's calls are billed and must be counted.
 */
export function passMessageBytes(bytes: Uint8Array, requestedModel: string, minBytes = PASS_MIN_BYTES, countsCalls = false): PassedMessage | null {
  if (bytes.byteLength < minBytes) return null;
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  // Code-execution calls are counted from the content (the usage object has no count): such an answer is decoded,
  // and so is one with a \u escape anywhere, which may spell a call's name. Without the tool in the request
  // nothing is counted (its bound is 0), so other answers keep their bytes, escapes of non-ASCII characters included.
  if (countsCalls && (buf.includes(CODE_EXECUTION) || buf.includes(ESCAPE))) return null;
  // An escaped ASCII character may spell a key (`"mod\u0065l"`, `"us\u0061ge"`) that the byte scans below miss and
  // a parser reads: such an answer is decoded (Anthropic writes text as UTF-8, so this is rare; `\u00e9` is not one).
  if (hasAsciiEscape(buf)) return null;
  const head = scanHead(buf);
  if (!head) return null;
  const usage = scanTail(buf);
  if (!usage) return null;
  // Another `model` key after the head (a top-level one after `content` is read last-wins by JSON.parse) would show
  // the client the upstream's model name: such an answer is decoded, which replaces every top-level one.
  if (buf.indexOf(MODEL, head.modelEnd) !== -1) return null;
  const model = Buffer.from(JSON.stringify(requestedModel));
  if (model.equals(buf.subarray(head.modelStart, head.modelEnd))) return { body: bytes, usage };
  return { body: Buffer.concat([buf.subarray(0, head.modelStart), model, buf.subarray(head.modelEnd)]), usage };
}
