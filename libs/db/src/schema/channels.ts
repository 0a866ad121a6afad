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

/**
 * One parameter or header override of a channel, as stored (already validated; see @gw/channels overrides.ts).
 * `models` (exact names or `prefix*`) limits it to some models; absent = every model of the channel.
 */
export interface ChannelOverride {
  op: 'set' | 'remove' | 'clamp' | 'set_header' | 'remove_header';
  /** Body field (dot path, e.g. `max_tokens`, `thinking.budget_tokens`) of set, remove and clamp. */
  path?: string;
  /** Header name (lower case) of set_header and remove_header. */
  name?: string;
  /** The value of set (any JSON) and set_header (a string). */
  value?: unknown;
  min?: number;
  max?: number;
  models?: string[];
}

/** Which model's price a channel's requests are billed at: the one the client asked for, or the one sent upstream after mapping. */
export type BillingModel = 'requested' | 'upstream';

/** One upstream key of a channel, as stored (sealed). Status: 1 enabled, 2 disabled by an operator, 3 auto-disabled. */
export interface ChannelKeyEntry {
  /**
   * Stable while its key is listed, but not the key's identity: PUT's `key` replaces key 1 under id 1, and the
   * highest id is given again after its key is removed. Automatic changes name a key by id and the fingerprint
   * of `key` (KeyRef in @gw/channels).
   */
  id: number;
  /** AES-GCM sealed key. */
  key: string;
  status: 1 | 2 | 3;
  /** Why it is disabled (scrubbed), '' when enabled. */
  reason: string;
  /** Unix seconds of the last status change to 2 or 3; null when enabled. */
  disabledAt: number | null;
  createdAt: number;
}

/** When upstream failures auto-disable a channel (every field optional; absent = the global defaults). */
export interface ChannelFailureRules {
  /** Upstream statuses that count as failures, e.g. "500-599,408"; absent = the classifier's default. */
  statuses?: string;
  /** Case-insensitive words in an upstream error message that make it count. */
  keywords?: string[];
  /** Failures that disable the channel ... */
  failures?: number;
  /** ... within this many latest requests ... */
  window_requests?: number;
  /** ... and (when set) within this many seconds. */
  window_seconds?: number;
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
  /** Every upstream key (sealed) with its status; [] = only `key` (old rows). `key` mirrors the first entry. */
  keys: text('keys', { mode: 'json' }).notNull().$type<ChannelKeyEntry[]>().default([]),
  /** 'random' | 'round_robin'. */
  keySelection: text('key_selection').notNull().default('random'),
  /** Auto-disable rules ({} = the global defaults). */
  failureRules: text('failure_rules', { mode: 'json' }).notNull().$type<ChannelFailureRules>().default({}),
  /** Parameter and header overrides applied to every request before the adapter ([] = none). */
  overrides: text('overrides', { mode: 'json' }).notNull().$type<ChannelOverride[]>().default([]),
  /** 'requested' (default: the price of the model the client asked for) | 'upstream' (the mapped model's). */
  billingModel: text('billing_model').notNull().default('requested'),
  /** Translated channels: send thinking back as `reasoning_content`: 'auto' (default: known hosts) | 'always' | 'never'. */
  reasoningEcho: text('reasoning_echo').notNull().default('auto'),
  /** Longest wait for the upstream's first byte before failing over; null = only `timeout_ms`. */
  firstByteTimeoutMs: integer('first_byte_timeout_ms'),
  /** How often an auto-disabled channel (or key) is probed; null = the global interval. */
  probeIntervalMs: integer('probe_interval_ms'),
  /** Why the channel is auto-disabled, last probe result. */
  statusReason: text('status_reason').notNull().default(''),
  responseTimeMs: integer('response_time_ms').notNull().default(0),
  testedAt: integer('tested_at'),
  createdAt: integer('created_at').notNull(),
  updatedAt: integer('updated_at').notNull(),
}, (t) => [index('channels_tag_idx').on(t.tag), index('channels_status_idx').on(t.status)]);
