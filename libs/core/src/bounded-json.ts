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
