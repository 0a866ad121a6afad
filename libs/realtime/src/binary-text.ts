/**
 * The text a lenient upstream may read a binary client frame as. Python's `json.loads(bytes)` detects the encoding
 * (`json.detect_encoding`): a UTF-8 BOM is skipped, and UTF-16 and UTF-32 (by their BOM, or by where the first NUL
 * bytes are) are decoded, so `session.update` in UTF-16 is an event to it while, read as UTF-8, it starts with `{\0`
 * and matches nothing the meter looks for: it was relayed unread (a model change, a create held by nothing).
 */

type Encoding = 'utf-8' | 'utf-16le' | 'utf-16be' | 'utf-32le' | 'utf-32be';

/** Python's json.detect_encoding, and the BOM bytes the decoder drops. */
function encodingOf(b: Uint8Array): { enc: Encoding; skip: number } {
  if (b[0] === 0 && b[1] === 0 && b[2] === 0xfe && b[3] === 0xff) return { enc: 'utf-32be', skip: 4 };
  if (b[0] === 0xff && b[1] === 0xfe && b[2] === 0 && b[3] === 0) return { enc: 'utf-32le', skip: 4 };
  if (b[0] === 0xfe && b[1] === 0xff) return { enc: 'utf-16be', skip: 2 };
  if (b[0] === 0xff && b[1] === 0xfe) return { enc: 'utf-16le', skip: 2 };
  if (b[0] === 0xef && b[1] === 0xbb && b[2] === 0xbf) return { enc: 'utf-8', skip: 3 };
  if (b.length >= 4) {
    if (!b[0]) return { enc: b[1] ? 'utf-16be' : 'utf-32be', skip: 0 };
    if (!b[1]) return { enc: b[2] || b[3] ? 'utf-16le' : 'utf-32le', skip: 0 };
  } else if (b.length === 2) {
    if (!b[0]) return { enc: 'utf-16be', skip: 0 };
    if (!b[1]) return { enc: 'utf-16le', skip: 0 };
  }
  return { enc: 'utf-8', skip: 0 };
}

const WIDTH: Record<Encoding, number> = { 'utf-8': 1, 'utf-16le': 2, 'utf-16be': 2, 'utf-32le': 4, 'utf-32be': 4 };

function unitAt(b: Uint8Array, at: number, enc: Encoding): number {
  switch (enc) {
    case 'utf-8': return b[at]!;
    case 'utf-16le': return b[at]! | (b[at + 1]! << 8);
    case 'utf-16be': return (b[at]! << 8) | b[at + 1]!;
    case 'utf-32le': return (b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16) | (b[at + 3]! << 24)) >>> 0;
    case 'utf-32be': return ((b[at]! << 24) | (b[at + 1]! << 16) | (b[at + 2]! << 8) | b[at + 3]!) >>> 0;
  }
}

/** Whether the first character after JSON whitespace is `{`: read unit by unit, so an audio frame is never decoded. */
function startsLikeObject(b: Uint8Array, enc: Encoding, skip: number): boolean {
  const w = WIDTH[enc];
  for (let at = skip; at + w <= b.length; at += w) {
    const c = unitAt(b, at, enc);
    if (c === 0x7b) return true;
    if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) return false;
  }
  return false;
}

const decoders = { 'utf-8': new TextDecoder('utf-8'), 'utf-16le': new TextDecoder('utf-16le'), 'utf-16be': new TextDecoder('utf-16be') };

function decode32(b: Uint8Array, enc: 'utf-32le' | 'utf-32be', skip: number): string {
  const parts: string[] = [];
  let chunk: number[] = [];
  for (let at = skip; at + 4 <= b.length; at += 4) {
    const c = unitAt(b, at, enc);
    chunk.push(c <= 0x10ffff ? c : 0xfffd);
    if (chunk.length === 8192) {
      parts.push(String.fromCodePoint(...chunk));
      chunk = [];
    }
  }
  parts.push(String.fromCodePoint(...chunk));
  return parts.join('');
}

/** Whether the frame can be a text event (binaryAsText would decode it), without decoding it. */
export function binaryIsEvent(b: Uint8Array): boolean {
  const { enc, skip } = encodingOf(b);
  return startsLikeObject(b, enc, skip);
}

/** The frame as the text event a lenient upstream may decode it to, or null when it cannot be one (audio, other bytes). */
export function binaryAsText(b: Uint8Array): string | null {
  const { enc, skip } = encodingOf(b);
  if (!startsLikeObject(b, enc, skip)) return null;
  if (enc === 'utf-32le' || enc === 'utf-32be') return decode32(b, enc, skip);
  return decoders[enc].decode(b.subarray(skip));
}
