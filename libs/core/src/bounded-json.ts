/**
 * JSON parsing with limits enforced before `JSON.parse` builds anything: a deeply nested document costs
 * the parser, every validator and every error message that walks it (recursively, sometimes
 * quadratically), so depth is measured first by one linear pass over the text.
 */

const OPEN_OBJ = 0x7b, OPEN_ARR = 0x5b, CLOSE_OBJ = 0x7d, CLOSE_ARR = 0x5d, QUOTE = 0x22, BACKSLASH = 0x5c;

/**
 * Whether the nesting depth of the JSON `text` stays within `maxDepth` (brackets inside strings do not
 * count). Linear, no allocation; the text need not be valid JSON (the parser judges that).
 */
export function jsonDepthWithin(text: string, maxDepth: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const b = text.charCodeAt(i);
    if (inString) {
      if (b === BACKSLASH) i++;
      else if (b === QUOTE) inString = false;
    } else if (b === QUOTE) inString = true;
    else if (b === OPEN_OBJ || b === OPEN_ARR) {
      if (++depth > maxDepth) return false;
    } else if (b === CLOSE_OBJ || b === CLOSE_ARR) depth--;
  }
  return true;
}

export type JsonParseResult = { ok: true; value: unknown } | { ok: false; reason: 'invalid' | 'too_deep' };

/** Parses JSON text after the depth check; empty (or whitespace-only) text parses as `{}`. */
export function parseBoundedJson(text: string, maxDepth: number): JsonParseResult {
  if (!jsonDepthWithin(text, maxDepth)) return { ok: false, reason: 'too_deep' };
  if (text.trim() === '') return { ok: true, value: {} };
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch {
    return { ok: false, reason: 'invalid' };
  }
}

const COMMA = 0x2c;

/**
 * Bounds of an upstream's JSON answer once decoded (jsonShapeWithin), and of the tool arguments inside it together.
 * The longest real answer (128k output tokens) has far fewer values, one per token at most, where 32 MiB of `{},` is
 * 11 million objects (about 1 GB of heap and 1.4 s of the event loop to parse; at this bound about 90 MB and 0.1 s).
 * JSON.stringify overflows the stack near 100,000 levels.
 */
export const ANSWER_MAX_VALUES = 1_000_000;
export const ANSWER_MAX_DEPTH = 10_000;

/**
 * Whether the JSON bytes hold at most `maxValues` values past their first, counted as the separators and openers
 * outside strings (`,` `{` `[`), nested at most `maxDepth` deep. What a parsed document costs is its number of
 * values, not its bytes: 32 MiB of `{},` is 11 million objects, about 1 GB of heap and 1.4 s of parsing, where
 * 32 MiB of text is one string. Linear, no allocation; the bytes need not be valid JSON (the parser judges that).
 */
export function jsonShapeWithin(bytes: Uint8Array, maxDepth: number, maxValues: number): boolean {
  return jsonValueCount(bytes, maxDepth, maxValues) >= 0;
}

/** The values past the first that jsonShapeWithin counts, or -1 past `maxValues` values or `maxDepth` levels. */
export function jsonValueCount(bytes: Uint8Array, maxDepth: number, maxValues: number): number {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let depth = 0;
  let values = 0;
  for (let i = 0; i < b.length; i++) {
    const c = b[i]!;
    if (c === QUOTE) {
      // To the closing quote (native search; one after an odd run of backslashes is escaped): a long text, most of an
      // answer's bytes, is skipped at memchr speed.
      for (let j = b.indexOf(QUOTE, i + 1); ; j = b.indexOf(QUOTE, j + 1)) {
        if (j < 0) return values;
        let k = j - 1;
        while (b[k] === BACKSLASH) k--;
        if ((j - 1 - k) % 2 === 0) {
          i = j;
          break;
        }
      }
    } else if (c === COMMA) {
      if (++values > maxValues) return -1;
    } else if (c === OPEN_OBJ || c === OPEN_ARR) {
      if (++values > maxValues || ++depth > maxDepth) return -1;
    } else if (c === CLOSE_OBJ || c === CLOSE_ARR) depth--;
  }
  return values;
}
