/**
 * Webhook signature checks over the raw body bytes (re-serialised JSON would not match), compared
 * in constant time. Every failure is a 400 GatewayError: the caller changes nothing.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { GatewayError } from '@gw/core';

/** Lowercase hex HMAC-SHA256 of the concatenated parts, keyed by the secret's UTF-8 bytes. */
export function hmacSha256Hex(secret: string, ...parts: Array<string | Uint8Array>): string {
  const h = createHmac('sha256', secret);
  for (const p of parts) h.update(p);
  return h.digest('hex');
}

/** Constant-time comparison of two hex digests (case-insensitive; different lengths never match). */
export function hexDigestEqual(expected: string, given: string): boolean {
  if (!/^[0-9a-fA-F]+$/.test(given) || given.length !== expected.length) return false;
  return timingSafeEqual(Buffer.from(expected, 'hex'), Buffer.from(given.toLowerCase(), 'hex'));
}

const bad = (code: string, message: string, param: string) => new GatewayError(400, code, message, { param });

/**
 * Stripe's scheme: header `t=<unix>,v1=<hex>[,v1=<hex>…]`, HMAC over `${t}.${rawBody}`. Any v1 may
 * match (several while a secret is rolled); other schemes (v0) are ignored so nobody can downgrade
 * the check. The timestamp is checked after the signature, in both directions: a timestamp more than
 * `toleranceSeconds` in the future is refused like a stale one (stripe-node only refuses old ones),
 * otherwise a captured request signed ahead of time would stay replayable for as long as it claims.
 */
export function verifyStripeSignature(raw: Uint8Array, header: string | null, secret: string, toleranceSeconds: number, now: number): { timestamp: number } {
  const param = 'stripe-signature';
  if (!header) throw bad('missing_signature', 'Missing Stripe-Signature header', param);
  let t = NaN;
  const v1: string[] = [];
  for (const item of header.split(',')) {
    const i = item.indexOf('=');
    if (i < 0) continue;
    const k = item.slice(0, i).trim();
    const v = item.slice(i + 1).trim();
    if (k === 't') t = /^\d+$/.test(v) ? Number(v) : NaN;
    else if (k === 'v1') v1.push(v);
  }
  if (!Number.isSafeInteger(t) || v1.length === 0) throw bad('invalid_signature', 'Unable to extract timestamp and v1 signatures from Stripe-Signature', param);
  const expected = hmacSha256Hex(secret, `${t}.`, raw);
  // Compare against every v1 (no early exit), so timing does not reveal which one matched.
  let matched = false;
  for (const sig of v1) matched = hexDigestEqual(expected, sig) || matched;
  if (!matched) throw bad('invalid_signature', 'No signature matches the payload', param);
  if (Math.abs(now - t) > toleranceSeconds) {
    throw bad('stale_signature', `Signature timestamp is more than ${toleranceSeconds} s ${t > now ? 'in the future' : 'old'}`, param);
  }
  return { timestamp: t };
}

/** Creem's scheme: header `creem-signature` = hex HMAC-SHA256 of the raw body. No timestamp: dedupe on event id. */
export function verifyCreemSignature(raw: Uint8Array, header: string | null, secret: string): void {
  const param = 'creem-signature';
  if (!header) throw bad('missing_signature', 'Missing creem-signature header', param);
  if (!hexDigestEqual(hmacSha256Hex(secret, raw), header.trim())) throw bad('invalid_signature', 'Signature does not match the payload', param);
}
