/**
 * The start of an upstream stream, read until the gateway can tell whether it begins with an error (stream-start.ts
 * in @gw/providers) or is no event stream at all, before committing to the channel. Bounded: past
 * STREAM_START_MAX_BYTES or STREAM_START_MAX_MS without a verdict the stream is committed as it is, as a stream
 * whose first event is not an error would be (an upstream sending only keep-alive comments while it thinks must not
 * be held back, nor failed over, for it).
 */
import { concatBytes } from '@gw/core';
import type { ClassifiedError, StreamStartJudge } from '@gw/providers';

/** Bytes read at most for a verdict: an error event, or the first chunk of an answer, is far smaller. */
export const STREAM_START_MAX_BYTES = 64 << 10;
/** Time waited at most for a verdict after the first chunk. */
export const STREAM_START_MAX_MS = 2000;

type ReadResult = { done: false; value: Uint8Array } | { done: true; value?: undefined };

export interface StreamStart {
  /** Everything read so far, the first chunk included. */
  bytes: Uint8Array;
  /** The verdict: an error the stream begins with, or null (fine, or undecided within the bounds). */
  error: ClassifiedError | null;
  /** True when the bytes are no event stream (an HTML page, a JSON body). */
  notEventStream: boolean;
  /** True when the stream ended before any event with data (comments, pings, an unfinished event): nothing to relay. */
  empty?: boolean;
  /** A read still in progress when the time ran out: the relay takes it over (its bytes must not be lost). */
  pending: Promise<ReadResult> | null;
}

const TIMEOUT = Symbol('timeout');

/** Reads on from `first` until `judge` decides or a bound is reached. A failed read throws (nothing was committed). */
export async function readStreamStart(reader: ReadableStreamDefaultReader<Uint8Array>, first: Uint8Array, judge: StreamStartJudge,
  o: { maxBytes?: number; maxMs?: number } = {}): Promise<StreamStart> {
  let kind = shapeOf(first, true);
  if (kind === 'other') return { bytes: first, error: null, notEventStream: true, pending: null };
  let verdict = judge.push(first);
  // Almost every stream is decided by its first chunk: no timer, no copy.
  if (verdict !== undefined) return { bytes: first, error: verdict, notEventStream: false, pending: null };
  const parts = [first];
  let total = first.byteLength;
  const maxBytes = o.maxBytes ?? STREAM_START_MAX_BYTES;
  // One timer wakes whichever read is awaited. Not Promise.race with one timeout promise: each race left a reaction on
  // it until the end, thousands for an upstream sending its start a byte at a time (6 MB held for 64 Ki reads, measured).
  let expired = false;
  let wake: ((v: typeof TIMEOUT) => void) | undefined;
  const timer = setTimeout(() => { expired = true; wake?.(TIMEOUT); }, o.maxMs ?? STREAM_START_MAX_MS);
  let pending: Promise<ReadResult> | null = null;
  let empty = false;
  try {
    while (verdict === undefined && total < maxBytes && !expired) {
      const read = reader.read();
      const r = await new Promise<ReadResult | typeof TIMEOUT>((resolve, reject) => {
        wake = resolve;
        read.then(resolve, reject);
      });
      if (r === TIMEOUT) {
        pending = read;
        break;
      }
      if (r.done) {
        verdict = judge.end();
        empty = verdict === undefined;
        break;
      }
      parts.push(r.value);
      total += r.value.byteLength;
      if (kind === 'blank' && (kind = shapeOf(r.value, false)) === 'other') break;
      verdict = judge.push(r.value);
    }
  } finally {
    clearTimeout(timer);
  }
  return { bytes: concatBytes(parts)!, error: kind === 'other' ? null : verdict ?? null, notEventStream: kind === 'other', pending, empty: empty && kind !== 'other' };
}

/**
 * What a stream's bytes show of its kind, by its first character after a BOM (at the very start) and whitespace:
 * `other` when it opens HTML or JSON (an HTML page, a JSON body on a 200), `blank` for whitespace alone (undecided),
 * else `sse`. An event stream starts with a field name, a comment (`:`) or a blank line; none starts with `<`, `{`
 * or `[` (such a line would be a field no client reads).
 */
function shapeOf(chunk: Uint8Array, start: boolean): 'sse' | 'other' | 'blank' {
  let i = start && chunk[0] === 0xef && chunk[1] === 0xbb && chunk[2] === 0xbf ? 3 : 0;
  while (i < chunk.length && (chunk[i] === 0x20 || chunk[i] === 0x0a || chunk[i] === 0x0d || chunk[i] === 0x09)) i++;
  if (i === chunk.length) return 'blank';
  const c = chunk[i];
  return c === 0x3c || c === 0x7b || c === 0x5b ? 'other' : 'sse'; // < { [
}
