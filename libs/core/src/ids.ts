import { timingSafeEqual } from 'node:crypto';

/** Random identifiers. All from crypto.getRandomValues; never Math.random for anything a client sees. */

const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** A base62 random string of `len` characters (~5.95 bits each). */
export function randomToken(len = 32): string {
  const bytes = crypto.getRandomValues(new Uint8Array(len));
  let out = '';
  for (let i = 0; i < len; i++) out += ALPHABET[bytes[i]! % 62];
  return out;
}

/** Milliseconds since the epoch in 8 base62 digits: sorts like the time until the year 8888. */
function timePrefix(ms = Date.now()): string {
  let out = '';
  for (let i = 0, n = ms; i < 8; i++, n = Math.floor(n / 62)) out = ALPHABET[n % 62] + out;
  return out;
}

/**
 * `req_…` request ids, echoed in the `request-id` header and error bodies. Time-ordered (like a
 * ULID): they are the unique key of usage rows and ledger charges, and ids that grow keep those
 * index inserts at the end of the B-tree instead of on a random page each time.
 */
export const newRequestId = () => `req_${timePrefix()}${randomToken(16)}`;
/** `msg_…` ids for translated responses. */
export const newMessageId = () => `msg_${randomToken(24)}`;

/** Hex SHA-256, used to store secrets (session ids, tokens, API keys) hashed. */
export function sha256Hex(input: string): string {
  return new Bun.CryptoHasher('sha256').update(input).digest('hex');
}

/** Constant-time string comparison for secrets and signatures. */
export function safeEqual(a: string, b: string): boolean {
  const ab = Buffer.from(a);
  const bb = Buffer.from(b);
  if (ab.length !== bb.length) return false;
  return timingSafeEqual(ab, bb);
}
