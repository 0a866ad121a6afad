/**
 * Client events an upstream could read otherwise than the gateway does. Lenient parsers (Go's encoding/json) match
 * keys case-insensitively, folding `ſ` to `s` and the Kelvin sign to `k`: `"Type"`, `"Session"`, `"MAX_OUTPUT_TOKENS"`
 * are the fields the meter reads, under names JSON.parse keeps apart. An event naming one of those fields so is
 * refused, not forwarded: read as written, it could switch the model, or be a create (or a limit) the meter never
 * saw. (A key given twice is a different problem: the metered events are forwarded as the gateway parsed them, see
 * meter.ts, so a merging parser never sees the copy the gateway dropped.)
 */

/** A key as a case-insensitive parser compares it. */
export const folded = (k: string): string => k.replace(/\u017f/g, 's').replace(/\u212a/g, 'k').toLowerCase();

/** The top-level fields the meter reads. */
const TOP = new Set(['type', 'event_id', 'session', 'response']);
/**
 * The `session`/`response` fields the meter reads on a client event (a differently spelt `model` is read as the model
 * by model-pin.ts, so it is not here).
 */
const BODY = new Set([
  'max_output_tokens', 'max_response_output_tokens', 'conversation', 'audio', 'turn_detection', 'input_audio_transcription',
  'input_audio_format', 'output_audio_format', 'prompt', 'tools', 'input', 'type',
]);

/** A key of `o` that a case-insensitive parser takes for one of `fields` while JSON.parse does not. */
function misspelt(o: unknown, fields: Set<string>): string | undefined {
  if (!o || typeof o !== 'object' || Array.isArray(o)) return undefined;
  for (const k of Object.keys(o)) if (!fields.has(k) && fields.has(folded(k))) return k;
  return undefined;
}

/** The key that makes a client event ambiguous, if any: at its top level, or in the `session`/`response` object a metered event carries. */
export function ambiguousKey(event: unknown, body?: 'session' | 'response'): string | undefined {
  return misspelt(event, TOP) ?? (body ? misspelt((event as any)[body], BODY) : undefined);
}

/** Whether the quote at `q` opens `"type"` in another ASCII case (`| 32` folds exactly the capitals of t, y, p, e). */
function otherTypeAt(text: string, q: number): boolean {
  if (text.charCodeAt(q + 5) !== 34) return false;
  const a = text.charCodeAt(q + 1), b = text.charCodeAt(q + 2), c = text.charCodeAt(q + 3), d = text.charCodeAt(q + 4);
  return (a | 32) === 116 && (b | 32) === 121 && (c | 32) === 112 && (d | 32) === 101 && !(a === 116 && b === 121 && c === 112 && d === 101);
}

/**
 * Whether `"type"` is written as a key in another case after `from` (a value spelt so only costs a parse). Linear
 * at any density of quotes: it jumps between the first few (an append's base64 has none), then reads the rest char
 * by char, as a call per quote made a frame of quotes cost 30 ns a quote (0.3-0.7 s for 20 MiB).
 */
export function otherTypeKeyAfter(text: string, from: number): boolean {
  const end = text.length - 5;
  let q = text.indexOf('"', from);
  for (let jumps = 0; q !== -1 && q < end && jumps < 64; jumps++, q = text.indexOf('"', q + 1)) if (otherTypeAt(text, q)) return true;
  if (q === -1) return false;
  for (; q < end; q++) if (text.charCodeAt(q) === 34 && text.charCodeAt(q + 5) === 34 && otherTypeAt(text, q)) return true;
  return false;
}

export const AMBIGUOUS_MESSAGE = (key: string) =>
  `Event has a key "${key.length > 64 ? `${key.slice(0, 64)}…` : key}" that differs only in case from a field of the event; it was not forwarded`;
