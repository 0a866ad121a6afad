import { sha256Hex } from '@gw/core';

/** How many single-use backup codes a user gets when enabling 2FA or regenerating. */
export const BACKUP_CODE_COUNT = 10;

// RFC 4648 Base32 alphabet: no 0/1/8/9, so codes survive being read aloud or typed from paper.
const BASE32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';

/**
 * Random backup codes shown as `XXXXX-XXXXX` (10 Base32 characters, 50 bits each). Their
 * entropy is well below 64 bits, so checks of them must be rate limited (NIST SP 800-63B).
 */
export function generateBackupCodes(n = BACKUP_CODE_COUNT): string[] {
  return Array.from({ length: n }, () => {
    const bytes = crypto.getRandomValues(new Uint8Array(10));
    const s = Array.from(bytes, (b) => BASE32[b & 31]).join('');
    return `${s.slice(0, 5)}-${s.slice(5)}`;
  });
}

/** Case, spaces and hyphens do not matter when a user types a code back. */
export function normalizeBackupCode(code: string): string {
  return code.replace(/[\s-]/g, '').toUpperCase();
}

/** True when `code` has the shape of a backup code (so it is never confused with a 6-digit TOTP). */
export function looksLikeBackupCode(code: string): boolean {
  return /^[A-Z2-7]{10}$/.test(normalizeBackupCode(code));
}

/**
 * Stored form of a backup code: SHA-256 salted with the user id (the codes are random, so a slow
 * hash adds nothing; the salt keeps equal codes of two users from sharing a hash).
 */
export function hashBackupCode(userId: number, code: string): string {
  return sha256Hex(`backup:${userId}:${normalizeBackupCode(code)}`);
}
