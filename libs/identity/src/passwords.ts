/** Password hashing with Bun's built-in argon2id. */

export const PASSWORD_MIN = 8;
export const PASSWORD_MAX = 128;

export const hashPassword = (plain: string) => Bun.password.hash(plain, { algorithm: 'argon2id' });

export const verifyPassword = (plain: string, hash: string) => Bun.password.verify(plain, hash).catch(() => false);

/** A verified hash of a random password, so timing of "no such user" matches "wrong password". */
let dummyHash: Promise<string> | undefined;
export const dummyPasswordHash = () => (dummyHash ??= hashPassword(crypto.randomUUID()));

/** A readable random password (for generated root and reset passwords). */
export function generatePassword(len = 20): string {
  const alphabet = 'ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789';
  const bytes = crypto.getRandomValues(new Uint8Array(len));
  return Array.from(bytes, (b) => alphabet[b % alphabet.length]).join('');
}
