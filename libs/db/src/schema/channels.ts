import { sqliteTable, integer, text, index } from 'drizzle-orm/sqlite-core';

/** 1 enabled, 2 disabled by an operator (never undone automatically), 3 disabled by health checks. */
export const CHANNEL_STATUS = { enabled: 1, manuallyDisabled: 2, autoDisabled: 3 } as const;

/** A channel's header policy as stored (snake_case like the API; every field optional). */
export interface HeaderPolicy {
  /** Client headers forwarded as sent (lower-case names), besides `anthropic-beta`. */
  forward_headers?: string[];
  /** `anthropic-beta` values removed before forwarding; `"*"` drops the header. */
  beta_strip?: string[];
  /** `anthropic-beta` values renamed before forwarding. */
  beta_rewrite?: Record<string, string>;
  /** Forward the body fields that select a pricier service level (`service_tier`, `speed`). */
  allow_service_tier?: boolean;
}

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
  /** Which client headers and billing-relevant body fields reach the upstream ({} = the defaults). */
  headerPolicy: text('header_policy', { mode: 'json' }).notNull().$type<HeaderPolicy>().default({}),
  /** Why the channel is auto-disabled, last probe result. */
  statusReason: text('status_reason').notNull().default(''),
  responseTimeMs: integer('response_time_ms').notNull().default(0),
  testedAt: integer('tested_at'),
  createdAt: integer('created_at').notNull(),
  updatedAt: integer('updated_at').notNull(),
}, (t) => [index('channels_tag_idx').on(t.tag), index('channels_status_idx').on(t.status)]);
