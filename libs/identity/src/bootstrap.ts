import { nowSeconds } from '@gw/core';
import { ROLE, type SecurityStore, type UsersStore } from '@gw/db';
import { PASSWORD_MAX, PASSWORD_MIN, generatePassword, hashPassword } from './passwords';

/**
 * Creates the root user on first start (empty users table). Returns the generated password when
 * none was configured, so the caller prints it exactly once.
 */
export async function bootstrapRoot(users: UsersStore, opts: { username: string; password?: string }): Promise<{ created: boolean; generatedPassword?: string }> {
  if ((await users.count()) > 0) return { created: false };
  const password = opts.password ?? generatePassword();
  const now = nowSeconds();
  // Several nodes may pass the count check at once on a shared database: the conditional insert lets
  // exactly one of them create the root, and only that one reports (and prints) a password.
  const root = await users.insertIfAbsent({
    username: opts.username, passwordHash: await hashPassword(password), displayName: 'Root',
    role: ROLE.root, status: 1, group: 'default', quota: 0, createdAt: now, updatedAt: now,
  });
  if (!root) return { created: false };
  return { created: true, generatedPassword: opts.password ? undefined : password };
}


export interface RootReset {
  username: string;
  /** Set when no password was given: the only time it exists in clear. */
  generatedPassword?: string;
  sessionsEnded: number;
  tokensRevoked: number;
}

/**
 * Offline recovery of the root account (the database's process lock must be held by the caller, so no
 * gateway serves it meanwhile): sets a new password, lifts any login lock, re-enables the account, and ends
 * every session and access token, since whoever held the lost password may hold those too.
 * `username` picks a root user by name; by default it is the first root user (the one created at start-up).
 */
export async function resetRootPassword(users: UsersStore, security: SecurityStore, opts: { username?: string; password?: string }): Promise<RootReset> {
  const root = opts.username !== undefined
    ? await users.byUsername(opts.username)
    : (await users.list({ role: ROLE.root, offset: 0, limit: 1_000_000 })).items.at(-1);
  if (!root) throw new Error(opts.username !== undefined ? `no user named "${opts.username}"` : 'the database has no root user');
  if (root.role !== ROLE.root) throw new Error(`user "${root.username}" is not a root user`);
  if (opts.password !== undefined && (opts.password.length < PASSWORD_MIN || opts.password.length > PASSWORD_MAX)) {
    throw new Error(`the password must be ${PASSWORD_MIN}-${PASSWORD_MAX} characters`);
  }
  const password = opts.password ?? generatePassword();
  const now = nowSeconds();
  await users.update(root.id, { passwordHash: await hashPassword(password), status: 1, failedLogins: 0, lockedUntil: 0, updatedAt: now });
  const ended = await security.endCredentials(root.id, {}, now);
  return {
    username: root.username, generatedPassword: opts.password === undefined ? password : undefined,
    sessionsEnded: ended.sessions_ended, tokensRevoked: ended.tokens_revoked,
  };
}
