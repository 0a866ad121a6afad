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
  } else if (!text.includes('"response.') && !text.includes('"error"') && !text.includes('"session.') && !text.includes('input_audio_transcription.') && !text.includes('"input_audio_buffer.') && !text.includes('\\')) {
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
const ERROR_OBJECT: Record<string, (event: any) => unknown> = {
  'response.done': (e) => e.response?.status_details?.error,
  'conversation.item.input_audio_transcription.failed': (e) => e.error,
};

/**
 * An upstream event with its error texts passed through `scrub` (upstreams echo keys and internal URLs in error
 * messages): an `error` event, re-serialised, with its `error.event_id` the client's own when `clientId` knows it (an
 * event forwarded under an id the gateway gave it); a failed `response.done` (`response.status_details.error`) or
 * input transcription (`error`), re-serialised only when scrubbing changed a text (before, both reached the client
 * verbatim). Any other frame, or one that is not JSON, is returned unchanged, so the byte-exact relay of everything
 * else is kept.
 */
export function scrubbedErrorEvent(text: string, scrub: (t: string) => string, clientId?: (id: string) => { id: unknown } | undefined): string {
  if (!text.includes('"error"')) return text;
  let event: any;
  try {
    event = JSON.parse(text);
  } catch {
    return text;
  }
  const texts = (o: unknown): boolean => {
    if (!o || typeof o !== 'object') return false;
    let changed = false;
    for (const [k, v] of Object.entries(o)) {
      if (typeof v !== 'string') continue;
      const s = scrub(v);
      if (s !== v) (o as Record<string, unknown>)[k] = s;
      changed ||= s !== v;
    }
    return changed;
  };
  if (!event || typeof event !== 'object') return text;
  const inner = typeof event.type === 'string' && Object.hasOwn(ERROR_OBJECT, event.type) ? ERROR_OBJECT[event.type]!(event) : undefined;
  if (inner !== undefined) return texts(inner) ? JSON.stringify(event) : text;
  if (event.type !== 'error' || !event.error || typeof event.error !== 'object') return text;
  const about = event.error.event_id;
  texts(event.error);
  const own = typeof about === 'string' ? clientId?.(about) : undefined;
  if (own) event.error.event_id = own.id;
  return JSON.stringify(event);
}
