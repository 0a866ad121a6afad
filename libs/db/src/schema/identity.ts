import { sql } from 'drizzle-orm';
import { sqliteTable, integer, text, index, uniqueIndex } from 'drizzle-orm/sqlite-core';

/** Roles are numbers so "at least admin" is a comparison (new-api convention). */
/** Per-model limits (JSON column): a model name or a prefix ending in `*` → its three limits (0 = unlimited). */
export type ModelLimitMap = Record<string, { rateLimitRpm: number; rateLimitTpm: number; maxConcurrency: number }>;

export const ROLE = { user: 1, admin: 10, root: 100 } as const;
export const USER_STATUS = { enabled: 1, disabled: 2 } as const;

export const users = sqliteTable('users', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  username: text('username').notNull(),
  passwordHash: text('password_hash').notNull(),
  displayName: text('display_name').notNull().default(''),
  email: text('email'),
  role: integer('role').notNull().default(1),
  status: integer('status').notNull().default(1),
  group: text('group').notNull().default('default'),
  /** Prepaid balance in quota units; always equals the sum of the user's ledger entries. */
  quota: integer('quota').notNull().default(0),
  /** Bumped by every write of quota (PostgreSQL: a trigger), so a balance mirror is only replaced by a newer one. */
  balanceVersion: integer('balance_version').notNull().default(0),
  usedQuota: integer('used_quota').notNull().default(0),
  requestCount: integer('request_count').notNull().default(0),
  /** AES-GCM sealed TOTP secret; null when 2FA was never set up. */
  totpSecret: text('totp_secret'),
  totpEnabled: integer('totp_enabled', { mode: 'boolean' }).notNull().default(false),
  /** Last accepted TOTP time step: a code's step is accepted once (replay protection). */
  totpLastStep: integer('totp_last_step').notNull().default(0),
  failedLogins: integer('failed_logins').notNull().default(0),
  lockCount: integer('lock_count').notNull().default(0),
  lockedUntil: integer('locked_until').notNull().default(0),
  /** Per-user limits over all the user's keys (0 = unlimited): requests/min, tokens/min, requests in flight. */
  rateLimitRpm: integer('rate_limit_rpm').notNull().default(0),
  rateLimitTpm: integer('rate_limit_tpm').notNull().default(0),
  maxConcurrency: integer('max_concurrency').notNull().default(0),
  /** Limits per model pattern; null = none. */
  modelLimits: text('model_limits', { mode: 'json' }).$type<ModelLimitMap | null>(),
  createdAt: integer('created_at').notNull(),
  updatedAt: integer('updated_at').notNull(),
}, (t) => [uniqueIndex('users_username_uq').on(t.username), uniqueIndex('users_email_uq').on(t.email),
  // E-mail lookups are case-insensitive (lower(email) = lower(?)): without this index each one scans every user.
  index('users_email_lower_idx').on(sql`lower(${t.email})`)]);

/** Login sessions: the cookie holds a random id, the table only its SHA-256. */
export const sessions = sqliteTable('sessions', {
  idHash: text('id_hash').primaryKey(),
  userId: integer('user_id').notNull().references(() => users.id, { onDelete: 'cascade' }),
  createdAt: integer('created_at').notNull(),
  expiresAt: integer('expires_at').notNull(),
  ip: text('ip').notNull().default(''),
  userAgent: text('user_agent').notNull().default(''),
}, (t) => [index('sessions_user_idx').on(t.userId)]);

/** Management access tokens (Bearer on /api/ for scripts and the CLI); stored hashed. */
export const accessTokens = sqliteTable('access_tokens', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  userId: integer('user_id').notNull().references(() => users.id, { onDelete: 'cascade' }),
  name: text('name').notNull().default(''),
  tokenHash: text('token_hash').notNull(),
  /** First characters, so an operator can tell tokens apart without the secret. */
  prefix: text('prefix').notNull(),
  createdAt: integer('created_at').notNull(),
  expiresAt: integer('expires_at'),
  lastUsedAt: integer('last_used_at'),
  revokedAt: integer('revoked_at'),
}, (t) => [uniqueIndex('access_tokens_hash_uq').on(t.tokenHash), index('access_tokens_user_idx').on(t.userId)]);

export const API_KEY_STATUS = { enabled: 1, disabled: 2 } as const;

/** Relay API keys (`sk-…`) that call /v1/*; stored hashed, shown once. */
export const apiKeys = sqliteTable('api_keys', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  userId: integer('user_id').notNull().references(() => users.id, { onDelete: 'cascade' }),
  name: text('name').notNull().default(''),
  keyHash: text('key_hash').notNull(),
  prefix: text('prefix').notNull(),
  status: integer('status').notNull().default(1),
  /** Unix seconds; null = never expires. */
  expiresAt: integer('expires_at'),
  unlimitedQuota: integer('unlimited_quota', { mode: 'boolean' }).notNull().default(true),
  /** Remaining budget of this key in quota units (ignored when unlimited). */
  remainQuota: integer('remain_quota').notNull().default(0),
  /** Bumped by every write of remain_quota or unlimited_quota (PostgreSQL: a trigger); orders the key's mirrors. */
  remainVersion: integer('remain_version').notNull().default(0),
  usedQuota: integer('used_quota').notNull().default(0),
  /** JSON string[]; null = every model the user's group may use. */
  models: text('models', { mode: 'json' }).$type<string[] | null>(),
  /** JSON string[] of IPs/CIDRs; null = any address. */
  allowIps: text('allow_ips', { mode: 'json' }).$type<string[] | null>(),
  /** Overrides the owner's group for routing; null = the owner's group. */
  group: text('group'),
  /** Requests per minute; 0 = unlimited. */
  rateLimitRpm: integer('rate_limit_rpm').notNull().default(0),
  /** Tokens per minute (reserved input bound + max output, counted at admission); 0 = unlimited. */
  rateLimitTpm: integer('rate_limit_tpm').notNull().default(0),
  /** Requests in flight at once; 0 = unlimited. */
  maxConcurrency: integer('max_concurrency').notNull().default(0),
  /** Limits per model pattern; null = none. */
  modelLimits: text('model_limits', { mode: 'json' }).$type<ModelLimitMap | null>(),
  createdAt: integer('created_at').notNull(),
  updatedAt: integer('updated_at').notNull(),
  lastUsedAt: integer('last_used_at'),
}, (t) => [uniqueIndex('api_keys_hash_uq').on(t.keyHash), index('api_keys_user_idx').on(t.userId)]);

/**
 * The owner of every deleted relay key, written by a trigger on api_keys (migration 0020): a key is deleted outright
 * but its usage rows stay, and a filter by its id finds them through the owner's `(user_id, created_at)` index
 * instead of scanning usage_logs (an index by key would cost every settled row).
 */
export const deletedApiKeys = sqliteTable('deleted_api_keys', {
  id: integer('id').primaryKey(),
  userId: integer('user_id').notNull(),
});

/** 2FA backup codes: single use, stored hashed. */
export const backupCodes = sqliteTable('backup_codes', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  userId: integer('user_id').notNull().references(() => users.id, { onDelete: 'cascade' }),
  codeHash: text('code_hash').notNull(),
  usedAt: integer('used_at'),
  createdAt: integer('created_at').notNull(),
}, (t) => [index('backup_codes_user_idx').on(t.userId)]);

/** Password reset tokens: single use, expiring, stored hashed; a new one voids the earlier ones. */
export const passwordResets = sqliteTable('password_resets', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  userId: integer('user_id').notNull().references(() => users.id, { onDelete: 'cascade' }),
  tokenHash: text('token_hash').notNull(),
  expiresAt: integer('expires_at').notNull(),
  usedAt: integer('used_at'),
  createdAt: integer('created_at').notNull(),
}, (t) => [uniqueIndex('password_resets_hash_uq').on(t.tokenHash), index('password_resets_user_idx').on(t.userId)]);

/**
 * SQLite mode's attempt windows that must outlive the process (wrong 2FA codes per credential: a restart must
 * not hand a code guesser a fresh day or 30 days). The two fixed windows of one key, as the in-process limits
 * keep them; PostgreSQL mode keeps these in Redis with the other shared limits.
 */
export const attemptWindows = sqliteTable('attempt_windows', {
  /** Flow and key, e.g. `2fa-day:u7:t12`. */
  key: text('key').primaryKey(),
  windowMs: integer('window_ms').notNull(),
  /** Start (ms) of the current fixed window. */
  start: integer('start').notNull(),
  cur: integer('cur').notNull(),
  prev: integer('prev').notNull(),
  /**
   * When the row is idle (ms): its window and the one after have passed, so it counts nothing. Computed by SQLite
   * from the row itself, so every write (the upsert's update too) keeps it right, and indexed so the sweep is a
   * range of that index rather than a read of every row (migration 0021).
   */
  expiresAt: integer('expires_at').generatedAlwaysAs(sql`start + 2 * window_ms`, { mode: 'virtual' }),
}, (t) => [index('attempt_windows_expires_idx').on(t.expiresAt)]);

/** Tables of the SQLite schema alone (no PostgreSQL twin, not copied by db:copy): what Redis keeps there. */
export const sqliteOnlyTables = ['attemptWindows', 'realtimeUnfinished'] as const;

/**
 * Routing and pricing groups. Users (and keys, overriding their user's) belong to one by name; a name
 * with no row behaves as ratio 1000, no fallbacks, no limits.
 */
export const groups = sqliteTable('groups', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  name: text('name').notNull(),
  description: text('description').notNull().default(''),
  /** Price multiplier in per-mille (1000 = ×1), folded into the single rounding of the cost. */
  ratio: integer('ratio').notNull().default(1000),
  /** JSON string[]: groups whose channels are tried, in order, after this group's own. */
  fallbacks: text('fallbacks', { mode: 'json' }).$type<string[]>().notNull().default([]),
  /** Limits over every request of the group (0 = unlimited). */
  rateLimitRpm: integer('rate_limit_rpm').notNull().default(0),
  rateLimitTpm: integer('rate_limit_tpm').notNull().default(0),
  maxConcurrency: integer('max_concurrency').notNull().default(0),
  /** Limits per model pattern; null = none. */
  modelLimits: text('model_limits', { mode: 'json' }).$type<ModelLimitMap | null>(),
  createdAt: integer('created_at').notNull(),
  updatedAt: integer('updated_at').notNull(),
}, (t) => [uniqueIndex('groups_name_uq').on(t.name)]);
