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

/** `req_…` request ids, echoed in the `request-id` header and error bodies. */
export const newRequestId = () => `req_${randomToken(24)}`;
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
