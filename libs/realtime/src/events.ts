/**
 * Reading the few events the gateway meters, without touching the bytes it relays: frames are
 * forwarded as received; this module only looks at them (and parses the rare ones that matter).
 */
import { jsonDepthWithin, randomToken } from '@gw/core';
import { ambiguousKey, otherTypeKeyAfter } from './ambiguous';

/** Server/client event types the meter reacts to; every other frame is passed through unread. */
export const METERED_TYPES = [
  'response.create', 'response.created', 'response.done', 'error', 'session.update', 'session.created', 'session.updated',
  'conversation.item.input_audio_transcription.completed', 'conversation.item.input_audio_transcription.failed',
  'conversation.item.input_audio_transcription.delta', 'input_audio_buffer.committed', 'input_audio_buffer.cleared',
  'input_audio_buffer.speech_stopped', 'input_audio_buffer.timeout_triggered',
  // Read for their transcription model only (a key's allow-list; the price of what the upstream transcribes):
  // a transcription session (beta) is configured and confirmed by these, and a lenient upstream may honour them in any session.
  'transcription_session.update', 'transcription_session.created', 'transcription_session.updated',
] as const;
export type MeteredType = (typeof METERED_TYPES)[number];

const FAST_PREFIX = '{"type":"';

const APPEND_PREFIX = '{"type":"input_audio_buffer.append"';
/** Quotes a plain append has past its type (`,"event_id":"…","audio":"…"}` has 8): a few more keys are allowed. */
const PLAIN_APPEND_QUOTES = 32;

/**
 * Whether a client frame is a plain audio append: the one event sent in bulk, which nothing parses (the meter reads
 * its type off the prefix and sizes its audio off its length). Any other frame may be parsed, so its size is bounded by
 * REALTIME_MAX_EVENT_BYTES. A few keys at most, no escape, no other `type` key in any case: what meteredEvent's fast
 * path lets through unparsed, with every scan bounded by the frame's length.
 */
export function plainAppend(text: string): boolean {
  if (!text.startsWith(APPEND_PREFIX)) return false;
  const from = APPEND_PREFIX.length;
  let quotes = 0;
  for (let q = text.indexOf('"', from); q !== -1; q = text.indexOf('"', q + 1)) if (++quotes > PLAIN_APPEND_QUOTES) return false;
  return !text.includes('\\', from) && !text.includes('"type"', from) && !otherTypeKeyAfter(text, from);
}

/** Client events the meter parses are configs and commands, a few levels deep: deeper ones are refused, not parsed. */
export const CLIENT_EVENT_MAX_DEPTH = 64;

/**
 * The event type of a text frame if it is one the meter needs, else undefined. OpenAI writes
 * `type` first, so the common case is a prefix read; other layouts fall back to a substring test
 * and a full parse, so a big audio delta is never parsed.
 *
 * A client frame (`client`) is read as strictly as any upstream parser would: a second `"type"` key (parsers
 * keep the last), one in another case (lenient parsers match keys case-insensitively: answered `{ ambiguous }`)
 * or an escape after the first type sends it to the full parse, and one that must be parsed
 * but nests deeper than CLIENT_EVENT_MAX_DEPTH is answered 'too_deep' (it may be a metered event the meter
 * cannot afford to read, so it must not be forwarded unread); one JSON.parse refuses, 'invalid_json'.
 */
export function meteredEvent(text: string): { type: MeteredType; event: any } | undefined;
export function meteredEvent(text: string, client: true): { type: MeteredType; event: any } | 'too_deep' | 'invalid_json' | { ambiguous: string } | undefined;
export function meteredEvent(text: string, client = false): { type: MeteredType; event: any } | 'too_deep' | 'invalid_json' | { ambiguous: string } | undefined {
  if (text.startsWith(FAST_PREFIX)) {
    const end = text.indexOf('"', FAST_PREFIX.length);
    const type = text.slice(FAST_PREFIX.length, end);
    if (!(METERED_TYPES as readonly string[]).includes(type) && !type.includes('\\')
      && !(client && (text.includes('"type"', end) || text.includes('\\', end) || otherTypeKeyAfter(text, end)))) return undefined;
  } else if (!text.includes('"response.') && !text.includes('"error"') && !text.includes('"session.') && !text.includes('input_audio_transcription.') && !text.includes('"input_audio_buffer.') && !text.includes('"transcription_session.') && !text.includes('\\')) {
    // A JSON escape can spell any type (`"response\u002ecreate"`) past a substring test; the upstream
    // parses it all the same, so a frame with one is parsed here too (base64 audio never has one).
    return undefined;
  }
  if (client && !jsonDepthWithin(text, CLIENT_EVENT_MAX_DEPTH)) return 'too_deep';
  let event: any;
  try {
    event = JSON.parse(text);
  } catch {
    // A client frame that may be a metered event must be read to be forwarded: lenient parsers take what JSON.parse
    // refuses (Python's json.loads reads NaN, Infinity, -Infinity as numbers), so an unread one could be a model
    // change or a create.
    return client ? 'invalid_json' : undefined;
  }
  if (!event || typeof event !== 'object') return undefined;
  // A client event whose type (or id) key a lenient upstream reads under another spelling (ambiguous.ts).
  const ambiguous = client ? ambiguousKey(event) : undefined;
  if (ambiguous !== undefined) return { ambiguous };
  return (METERED_TYPES as readonly string[]).includes(event.type) ? { type: event.type, event } : undefined;
}

/** A realtime `error` server event (as in OpenAI's Realtime API), as the gateway sends it before closing. */
export function errorEvent(type: string, code: string, message: string): string {
  return JSON.stringify({
    type: 'error',
    event_id: `event_gw_${randomToken(16)}`,
    error: { type, code, message, param: null, event_id: null },
  });
}

/** Upstream events that carry an error object of the upstream's own words (OpenAI's shapes), and where it is. */
const ERROR_PATH: Record<string, string[]> = {
  'response.done': ['response', 'status_details', 'error'],
  'conversation.item.input_audio_transcription.failed': ['error'],
};

/**
 * Deepest a rewritten upstream event is kept: below it a value is cut to null. JSON.parse reads any depth, but
 * JSON.stringify overflows the stack past ~100,000 levels (a 200 KB frame), and that throw, in the upstream socket's
 * message handler, ended the gateway's process.
 */
export const UPSTREAM_REWRITE_MAX_DEPTH = 64;

/**
 * A copy of `v` that JSON.stringify can always write: cut below UPSTREAM_REWRITE_MAX_DEPTH, and with `scrub`, every
 * string in it (object keys too, at any depth: an upstream may nest its provider's raw error, as OpenRouter's
 * `error.metadata.raw` does) scrubbed. `changed` tells whether anything differs.
 */
function rebuilt(v: unknown, scrub: ((t: string) => string) | null, s: { changed: boolean }, depth = 0): unknown {
  if (typeof v === 'string') {
    const out = scrub ? scrub(v) : v;
    if (out !== v) s.changed = true;
    return out;
  }
  if (!v || typeof v !== 'object') return v;
  if (depth >= UPSTREAM_REWRITE_MAX_DEPTH) {
    s.changed = true;
    return null;
  }
  if (Array.isArray(v)) return v.map((x) => rebuilt(x, scrub, s, depth + 1));
  // No prototype: a `__proto__` key stays a key, as JSON.parse made it.
  const o: Record<string, unknown> = Object.create(null);
  for (const [k, x] of Object.entries(v)) o[rebuilt(k, scrub, s) as string] = rebuilt(x, scrub, s, depth + 1);
  return o;
}

/**
 * An upstream event with its error texts passed through `scrub` (upstreams echo keys and internal URLs in error
 * messages, at any depth of the error object): an `error` event, every string of it, re-serialised, with its
 * `error.event_id` the client's own when `clientId` knows it (an event forwarded under an id the gateway gave it); a
 * failed `response.done` (`response.status_details.error`) or input transcription (`error`), re-serialised only
 * when scrubbing changed a text (before, both reached the client verbatim). A rewritten event nesting deeper than
 * UPSTREAM_REWRITE_MAX_DEPTH is cut there. Any other frame, or one that is not JSON, is returned unchanged, so the
 * byte-exact relay of everything else is kept.
 */
export function scrubbedErrorEvent(text: string, scrub: (t: string) => string, clientId?: (id: string) => { id: unknown } | undefined): string {
  if (!text.includes('"error"')) return text;
  let event: any;
  try {
    event = JSON.parse(text);
  } catch {
    return text;
  }
  if (!event || typeof event !== 'object' || Array.isArray(event)) return text;
  const s = { changed: false };
  const path = typeof event.type === 'string' && Object.hasOwn(ERROR_PATH, event.type) ? ERROR_PATH[event.type]! : undefined;
  if (path) {
    const last = path.at(-1)!;
    let parent: any = event;
    for (const k of path.slice(0, -1)) parent = parent && typeof parent === 'object' ? parent[k] : undefined;
    if (!parent || typeof parent !== 'object' || !parent[last] || typeof parent[last] !== 'object') return text;
    // Scrubbed in place, then the whole event bounded (the error object may sit below the cut).
    parent[last] = rebuilt(parent[last], scrub, s);
    return s.changed ? JSON.stringify(rebuilt(event, null, s)) : text;
  }
  if (event.type !== 'error' || !event.error || typeof event.error !== 'object') return text;
  const about = event.error.event_id;
  const out = rebuilt(event, scrub, s) as any;
  const own = typeof about === 'string' ? clientId?.(about) : undefined;
  if (own && out.error && typeof out.error === 'object') out.error.event_id = own.id;
  return JSON.stringify(out);
}
