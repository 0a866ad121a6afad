import { sql } from 'drizzle-orm';
import { pgTable, integer, text, boolean, jsonb, index, uniqueIndex } from 'drizzle-orm/pg-core';
import { big, idColumn } from './columns';
import type { ModelLimitMap } from '../schema/identity';

/** PostgreSQL twin of ../schema/identity.ts: same exports, property names and column names. */
export { ROLE, USER_STATUS, API_KEY_STATUS } from '../schema/identity';

export const users = pgTable('users', {
  id: idColumn(),
  username: text('username').notNull(),
  passwordHash: text('password_hash').notNull(),
  displayName: text('display_name').notNull().default(''),
  email: text('email'),
  role: integer('role').notNull().default(1),
  status: integer('status').notNull().default(1),
  group: text('group').notNull().default('default'),
  /** Prepaid balance in quota units; always equals the sum of the user's ledger entries. */
  quota: big('quota').notNull().default(0),
  /** Bumped by a trigger on every write of quota, so a balance mirror is only replaced by a newer one. */
  balanceVersion: big('balance_version').notNull().default(0),
  usedQuota: big('used_quota').notNull().default(0),
  requestCount: big('request_count').notNull().default(0),
  totpSecret: text('totp_secret'),
  totpEnabled: boolean('totp_enabled').notNull().default(false),
  totpLastStep: big('totp_last_step').notNull().default(0),
  failedLogins: big('failed_logins').notNull().default(0),
  lockCount: big('lock_count').notNull().default(0),
  lockedUntil: big('locked_until').notNull().default(0),
  rateLimitRpm: integer('rate_limit_rpm').notNull().default(0),
  rateLimitTpm: big('rate_limit_tpm').notNull().default(0),
  maxConcurrency: integer('max_concurrency').notNull().default(0),
  modelLimits: jsonb('model_limits').$type<ModelLimitMap | null>(),
  createdAt: big('created_at').notNull(),
  updatedAt: big('updated_at').notNull(),
}, (t) => [uniqueIndex('users_username_uq').on(t.username), uniqueIndex('users_email_uq').on(t.email),
  // E-mail lookups are case-insensitive (lower(email) = lower(?)): without this index each one scans every user.
  index('users_email_lower_idx').on(sql`lower(${t.email})`)]);

export const sessions = pgTable('sessions', {
  idHash: text('id_hash').primaryKey(),
  userId: big('user_id').notNull().references(() => users.id, { onDelete: 'cascade' }),
  createdAt: big('created_at').notNull(),
  expiresAt: big('expires_at').notNull(),
  ip: text('ip').notNull().default(''),
  userAgent: text('user_agent').notNull().default(''),
}, (t) => [index('sessions_user_idx').on(t.userId)]);

export const accessTokens = pgTable('access_tokens', {
  id: idColumn(),
  userId: big('user_id').notNull().references(() => users.id, { onDelete: 'cascade' }),
  name: text('name').notNull().default(''),
  tokenHash: text('token_hash').notNull(),
  prefix: text('prefix').notNull(),
  createdAt: big('created_at').notNull(),
  expiresAt: big('expires_at'),
  lastUsedAt: big('last_used_at'),
  revokedAt: big('revoked_at'),
}, (t) => [uniqueIndex('access_tokens_hash_uq').on(t.tokenHash), index('access_tokens_user_idx').on(t.userId)]);

export const apiKeys = pgTable('api_keys', {
  id: idColumn(),
  userId: big('user_id').notNull().references(() => users.id, { onDelete: 'cascade' }),
  name: text('name').notNull().default(''),
  keyHash: text('key_hash').notNull(),
  prefix: text('prefix').notNull(),
  status: integer('status').notNull().default(1),
  expiresAt: big('expires_at'),
  unlimitedQuota: boolean('unlimited_quota').notNull().default(true),
  remainQuota: big('remain_quota').notNull().default(0),
  /** Bumped by a trigger on every write of remain_quota or unlimited_quota; orders the key's mirrors. */
  remainVersion: big('remain_version').notNull().default(0),
  usedQuota: big('used_quota').notNull().default(0),
  models: jsonb('models').$type<string[] | null>(),
  allowIps: jsonb('allow_ips').$type<string[] | null>(),
  group: text('group'),
  rateLimitRpm: integer('rate_limit_rpm').notNull().default(0),
  rateLimitTpm: big('rate_limit_tpm').notNull().default(0),
  maxConcurrency: integer('max_concurrency').notNull().default(0),
  modelLimits: jsonb('model_limits').$type<ModelLimitMap | null>(),
  createdAt: big('created_at').notNull(),
  updatedAt: big('updated_at').notNull(),
  lastUsedAt: big('last_used_at'),
}, (t) => [uniqueIndex('api_keys_hash_uq').on(t.keyHash), index('api_keys_user_idx').on(t.userId)]);

/** See ../schema/identity.ts (the trigger: migration 0022). The id is the deleted key's, never generated here. */
export const deletedApiKeys = pgTable('deleted_api_keys', {
  id: idColumn(),
  userId: big('user_id').notNull(),
});

export const backupCodes = pgTable('backup_codes', {
  id: idColumn(),
  userId: big('user_id').notNull().references(() => users.id, { onDelete: 'cascade' }),
  codeHash: text('code_hash').notNull(),
  usedAt: big('used_at'),
  createdAt: big('created_at').notNull(),
}, (t) => [index('backup_codes_user_idx').on(t.userId)]);

export const passwordResets = pgTable('password_resets', {
  id: idColumn(),
  userId: big('user_id').notNull().references(() => users.id, { onDelete: 'cascade' }),
  tokenHash: text('token_hash').notNull(),
  expiresAt: big('expires_at').notNull(),
  usedAt: big('used_at'),
  createdAt: big('created_at').notNull(),
}, (t) => [uniqueIndex('password_resets_hash_uq').on(t.tokenHash), index('password_resets_user_idx').on(t.userId)]);

export const groups = pgTable('groups', {
  id: idColumn(),
  name: text('name').notNull(),
  description: text('description').notNull().default(''),
  ratio: integer('ratio').notNull().default(1000),
  fallbacks: jsonb('fallbacks').$type<string[]>().notNull().default([]),
  rateLimitRpm: integer('rate_limit_rpm').notNull().default(0),
  rateLimitTpm: big('rate_limit_tpm').notNull().default(0),
  maxConcurrency: integer('max_concurrency').notNull().default(0),
  modelLimits: jsonb('model_limits').$type<ModelLimitMap | null>(),
  createdAt: big('created_at').notNull(),
  updatedAt: big('updated_at').notNull(),
}, (t) => [uniqueIndex('groups_name_uq').on(t.name)]);
