import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

/**
 * Seals secrets at rest (channel keys, TOTP secrets) with AES-256-GCM under the configured key.
 * Format: `v1.<iv b64url>.<tag b64url>.<ciphertext b64url>`; the version prefix allows key rotation later.
 */
export class SecretBox {
  constructor(private readonly key: Uint8Array) {
    if (key.length !== 32) throw new Error('SecretBox needs a 32-byte key');
  }

  seal(plain: string): string {
    const iv = randomBytes(12);
    const c = createCipheriv('aes-256-gcm', this.key, iv);
    const body = Buffer.concat([c.update(plain, 'utf8'), c.final()]);
    return ['v1', iv.toString('base64url'), c.getAuthTag().toString('base64url'), body.toString('base64url')].join('.');
  }

  open(sealed: string): string {
    const [v, iv, tag, body] = sealed.split('.');
    if (v !== 'v1' || !iv || !tag || body === undefined) throw new Error('not a sealed secret');
    const d = createDecipheriv('aes-256-gcm', this.key, Buffer.from(iv, 'base64url'));
    d.setAuthTag(Buffer.from(tag, 'base64url'));
    return Buffer.concat([d.update(Buffer.from(body, 'base64url')), d.final()]).toString('utf8');
  }
}

/** Secrets shorter than this are shown as stars only: their first and last 4 characters would be most of them. */
const MASK_MIN_REVEAL = 20;

/**
 * Shows the first and last few characters of a secret: enough to recognise, never enough to use. The ends are
 * shown only when at least 12 characters stay hidden (a 10-character header value used to show 8 of its 10).
 */
export function maskSecret(secret: string): string {
  if (secret.length < MASK_MIN_REVEAL) return '*'.repeat(secret.length);
  return `${secret.slice(0, 4)}…${secret.slice(-4)}`;
}
