/**
 * A streamed answer is asked for uncompressed, and bounded by its decoded size if an upstream compresses it anyway.
 * Bun's fetch decodes a compressed body on its own, so a few kB on the wire can become hundreds of MB for the SSE
 * scanner: the upstream would spend nothing while the gateway spends CPU and memory (measured before: a 32 MiB gzip
 * bomb of blank lines took ~6 s wall / 4.3 s CPU of a stream and stalled /health). An uncompressed stream needs no
 * such bound: every byte the gateway scans, the upstream had to send.
 */
import type { UpstreamRequest } from '@gw/providers';

/** Decoded bytes that may arrive in a row without a byte for the client (an honest stream's largest event is far smaller). */
export const COMPRESSED_SILENT_BYTES = 1 << 20;
/**
 * Decoded bytes one byte sent to the client pays for. A byte for the client does not wipe the count: a `ping` or a
 * one-letter delta after every MiB of comment lines would otherwise keep the scanner busy for the whole 32 MiB from
 * a few kB on the wire. Honest streams send on about what they bring (native: the same bytes; translated: a little
 * less), so they stay near zero.
 */
export const DECODED_PER_SENT_BYTE = 16;
/** Decoded bytes a compressed stream may bring in all: the limit of a non-streaming answer (RESPONSE_BODY_BYTES). */
export const COMPRESSED_STREAM_BYTES = 32 << 20;

/** A streaming request's init asking for no compression (Bun's fetch offers gzip, deflate, br and zstd otherwise). */
export function identityEncoding(init: UpstreamRequest['init']): UpstreamRequest['init'] {
  return { ...init, headers: { ...init.headers, 'accept-encoding': 'identity' } };
}

/** Whether a response body arrives compressed (any content-encoding but identity). */
export function isCompressed(headers: Headers): boolean {
  const e = headers.get('content-encoding');
  return e !== null && e.trim() !== '' && !/^\s*identity\s*$/i.test(e);
}

/** The bounds of one compressed stream's decoded bytes. */
export class DecodedBound {
  private total = 0;
  private silent = 0;

  constructor(private readonly silentMax = COMPRESSED_SILENT_BYTES, private readonly totalMax = COMPRESSED_STREAM_BYTES) {}

  /** Before a decoded chunk is scanned: why it must not be (the stream's total would pass its bound), else null. */
  take(bytes: number): string | null {
    this.total += bytes;
    this.silent += bytes;
    return this.total > this.totalMax ? `The upstream's compressed stream decoded to more than ${this.totalMax} bytes.` : null;
  }

  /** After the chunk: the bytes it gave the client; why the stream must end (too much decoded for too little sent), else null. */
  scanned(sent: number): string | null {
    this.silent = Math.max(0, this.silent - sent * DECODED_PER_SENT_BYTE);
    return this.silent > this.silentMax ? `The upstream's compressed stream decoded to more than ${this.silentMax} bytes beyond what it sent on.` : null;
  }
}
