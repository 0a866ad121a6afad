import { sqliteTable, integer, text, index } from 'drizzle-orm/sqlite-core';

/** 1 enabled, 2 disabled by an operator (never undone automatically), 3 disabled by health checks. */
export const CHANNEL_STATUS = { enabled: 1, manuallyDisabled: 2, autoDisabled: 3 } as const;

export const channels = sqliteTable('channels', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  name: text('name').notNull(),
  /** Adapter type: 'anthropic' | 'openai'. */
  type: text('type').notNull(),
  /** Upstream origin without /v1. */
  baseUrl: text('base_url').notNull(),
  /** AES-GCM sealed upstream key; never returned in full. */
  key: text('key').notNull(),
  models: text('models', { mode: 'json' }).notNull().$type<string[]>(),
  /** Requested model → upstream model. */
  modelMapping: text('model_mapping', { mode: 'json' }).notNull().$type<Record<string, string>>(),
  /** Comma-separated groups allowed to use this channel. */
  group: text('group').notNull().default('default'),
  tag: text('tag').notNull().default(''),
  priority: integer('priority').notNull().default(0),
  weight: integer('weight').notNull().default(1),
  status: integer('status').notNull().default(1),
  timeoutMs: integer('timeout_ms').notNull().default(300_000),
  headers: text('headers', { mode: 'json' }).notNull().$type<Record<string, string>>(),
  /** Why the channel is auto-disabled, last probe result. */
  statusReason: text('status_reason').notNull().default(''),
  responseTimeMs: integer('response_time_ms').notNull().default(0),
  testedAt: integer('tested_at'),
  createdAt: integer('created_at').notNull(),
  updatedAt: integer('updated_at').notNull(),
}, (t) => [index('channels_tag_idx').on(t.tag), index('channels_status_idx').on(t.status)]);
