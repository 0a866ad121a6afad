import { nowSeconds } from '@gw/core';
import { ROLE, type UsersRepo } from '@gw/db';
import { generatePassword, hashPassword } from './passwords';

/**
 * Creates the root user on first start (empty users table). Returns the generated password when
 * none was configured, so the caller prints it exactly once.
 */
export async function bootstrapRoot(users: UsersRepo, opts: { username: string; password?: string }): Promise<{ created: boolean; generatedPassword?: string }> {
  if (users.count() > 0) return { created: false };
  const password = opts.password ?? generatePassword();
  const now = nowSeconds();
  users.insert({
    username: opts.username, passwordHash: await hashPassword(password), displayName: 'Root',
    role: ROLE.root, status: 1, group: 'default', quota: 0, createdAt: now, updatedAt: now,
  });
  return { created: true, generatedPassword: opts.password ? undefined : password };
}

