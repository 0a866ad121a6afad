import { describe, expect, test } from 'bun:test';
import { createHmac } from 'node:crypto';
import { GatewayError } from '@gw/core';
import { hexDigestEqual, verifyCreemSignature, verifyStripeSignature } from './signatures';

const enc = (s: string) => new TextEncoder().encode(s);
const hmac = (secret: string, msg: string) => createHmac('sha256', secret).update(msg).digest('hex');
const code = (fn: () => unknown) => {
  try { fn(); } catch (e) { expect(e).toBeInstanceOf(GatewayError); expect((e as GatewayError).status).toBe(400); return (e as GatewayError).code; }
  return 'passed';
};

describe('verifyStripeSignature', () => {
  const secret = 'whsec_unit';
  const body = '{"id":"evt_1"}';
  const t = 1_700_000_000;
  const good = hmac(secret, `${t}.${body}`);

  test('accepts a matching v1 within the tolerance, among other v1/v0 entries', () => {
    expect(verifyStripeSignature(enc(body), `t=${t},v1=${good}`, secret, 300, t + 300)).toEqual({ timestamp: t });
    expect(code(() => verifyStripeSignature(enc(body), `t=${t},v1=${'0'.repeat(64)},v1=${good},v0=abc`, secret, 300, t))).toBe('passed');
    // Clock skew ahead of us, inside the tolerance, passes.
    expect(code(() => verifyStripeSignature(enc(body), `t=${t},v1=${good}`, secret, 300, t - 300))).toBe('passed');
  });

  test('refuses missing, malformed, mismatched, v0-only and stale headers', () => {
    expect(code(() => verifyStripeSignature(enc(body), null, secret, 300, t))).toBe('missing_signature');
    expect(code(() => verifyStripeSignature(enc(body), 'nonsense', secret, 300, t))).toBe('invalid_signature');
    expect(code(() => verifyStripeSignature(enc(body), `v1=${good}`, secret, 300, t))).toBe('invalid_signature');
    expect(code(() => verifyStripeSignature(enc(body), `t=abc,v1=${good}`, secret, 300, t))).toBe('invalid_signature');
    expect(code(() => verifyStripeSignature(enc(body), `t=${t},v0=${good}`, secret, 300, t))).toBe('invalid_signature');
    expect(code(() => verifyStripeSignature(enc(body + ' '), `t=${t},v1=${good}`, secret, 300, t))).toBe('invalid_signature');
    expect(code(() => verifyStripeSignature(enc(body), `t=${t + 1},v1=${good}`, secret, 300, t))).toBe('invalid_signature');
    expect(code(() => verifyStripeSignature(enc(body), `t=${t},v1=${good}`, 'whsec_other', 300, t))).toBe('invalid_signature');
    expect(code(() => verifyStripeSignature(enc(body), `t=${t},v1=${good}`, secret, 300, t + 301))).toBe('stale_signature');
    // Unlike stripe-node, a timestamp beyond the tolerance in the future is refused too.
    expect(code(() => verifyStripeSignature(enc(body), `t=${t},v1=${good}`, secret, 300, t - 301))).toBe('stale_signature');
    expect(code(() => verifyStripeSignature(enc(body), `t=${t},v1=${good}`, secret, 300, t - 1000))).toBe('stale_signature');
  });

  test('signs the raw bytes, not a decoded string (invalid UTF-8 still verifies byte for byte)', () => {
    const raw = new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]);
    const sig = createHmac('sha256', secret).update(`${t}.`).update(raw).digest('hex');
    expect(code(() => verifyStripeSignature(raw, `t=${t},v1=${sig}`, secret, 300, t))).toBe('passed');
    const lossy = hmac(secret, `${t}.${new TextDecoder().decode(raw)}`);
    expect(code(() => verifyStripeSignature(raw, `t=${t},v1=${lossy}`, secret, 300, t))).toBe('invalid_signature');
  });
});

describe('verifyCreemSignature', () => {
  test('hex HMAC of the raw body, case-insensitive, constant length', () => {
    const body = '{"id":"evt_1","eventType":"checkout.completed"}';
    const sig = hmac('creem', body);
    expect(code(() => verifyCreemSignature(enc(body), sig, 'creem'))).toBe('passed');
    expect(code(() => verifyCreemSignature(enc(body), ` ${sig.toUpperCase()} `, 'creem'))).toBe('passed');
    expect(code(() => verifyCreemSignature(enc(body), null, 'creem'))).toBe('missing_signature');
    expect(code(() => verifyCreemSignature(enc(body), sig.slice(2), 'creem'))).toBe('invalid_signature');
    expect(code(() => verifyCreemSignature(enc(body), `${sig}00`, 'creem'))).toBe('invalid_signature');
    expect(code(() => verifyCreemSignature(enc(`${body} `), sig, 'creem'))).toBe('invalid_signature');
    expect(code(() => verifyCreemSignature(enc(body), 'zz'.repeat(32), 'creem'))).toBe('invalid_signature');
  });

  test('hexDigestEqual', () => {
    expect(hexDigestEqual('ab12', 'AB12')).toBe(true);
    expect(hexDigestEqual('ab12', 'ab13')).toBe(false);
    expect(hexDigestEqual('ab12', 'ab1')).toBe(false);
    expect(hexDigestEqual('ab12', '')).toBe(false);
  });
});
