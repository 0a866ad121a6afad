/** Password hashing with Bun's built-in argon2id, each hash and verify admitted by the node's PasswordGate. */
import { passwordGate } from './password-gate';

export const PASSWORD_MIN = 8;
export const PASSWORD_MAX = 128;

/** Without the gate: only for a caller that already holds a slot (see login, current-password). */
export const hashPasswordHeld = (plain: string) => Bun.password.hash(plain, { algorithm: 'argon2id' });
export const verifyPasswordHeld = (plain: string, hash: string) => Bun.password.verify(plain, hash).catch(() => false);

export const hashPassword = (plain: string) => passwordGate().run(() => hashPasswordHeld(plain));

export const verifyPassword = (plain: string, hash: string) => passwordGate().run(() => verifyPasswordHeld(plain, hash));

/** A verified hash of a random password, so timing of "no such user" matches "wrong password". */
let dummyHash: Promise<string> | undefined;
// Made without a slot: it is asked for while one is held, and made once per process.
export const dummyPasswordHash = () => (dummyHash ??= hashPasswordHeld(crypto.randomUUID()));

/** A readable random password (for generated root and reset passwords). */
export function generatePassword(len = 20): string {
  const alphabet = 'ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789';
  const bytes = crypto.getRandomValues(new Uint8Array(len));
  return Array.from(bytes, (b) => alphabet[b % alphabet.length]).join('');
}
