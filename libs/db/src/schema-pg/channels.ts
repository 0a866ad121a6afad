import { pgTable, integer, text, json, jsonb, index } from 'drizzle-orm/pg-core';
import { big, idColumn } from './columns';

/** PostgreSQL twin of ../schema/channels.ts: same exports, property names and column names. */
export { CHANNEL_STATUS } from '../schema/channels';
import type { ChannelFailureRules, ChannelKeyEntry, ChannelOverride, HeaderPolicy } from '../schema/channels';

export const channels = pgTable('channels', {
  id: idColumn(),
  name: text('name').notNull(),
  type: text('type').notNull(),
  baseUrl: text('base_url').notNull(),
  key: text('key').notNull(),
  models: jsonb('models').notNull().$type<string[]>(),
  modelMapping: jsonb('model_mapping').notNull().$type<Record<string, string>>(),
  group: text('group').notNull().default('default'),
  tag: text('tag').notNull().default(''),
  priority: integer('priority').notNull().default(0),
  weight: integer('weight').notNull().default(1),
  status: integer('status').notNull().default(1),
  timeoutMs: integer('timeout_ms').notNull().default(300_000),
  headers: jsonb('headers').notNull().$type<Record<string, string>>(),
  headerPolicy: jsonb('header_policy').notNull().$type<HeaderPolicy>().default({}),
  keys: jsonb('keys').notNull().$type<ChannelKeyEntry[]>().default([]),
  keySelection: text('key_selection').notNull().default('random'),
  failureRules: jsonb('failure_rules').notNull().$type<ChannelFailureRules>().default({}),
  // json, not jsonb: jsonb re-sorts object keys, and an override (and a value it sets) is shown, and sent
  // upstream, with its keys in the order it was written, as on SQLite.
  overrides: json('overrides').notNull().$type<ChannelOverride[]>().default([]),
  billingModel: text('billing_model').notNull().default('requested'),
  reasoningEcho: text('reasoning_echo').notNull().default('auto'),
  firstByteTimeoutMs: integer('first_byte_timeout_ms'),
  probeIntervalMs: big('probe_interval_ms'),
  statusReason: text('status_reason').notNull().default(''),
  responseTimeMs: big('response_time_ms').notNull().default(0),
  testedAt: big('tested_at'),
  createdAt: big('created_at').notNull(),
  updatedAt: big('updated_at').notNull(),
}, (t) => [index('channels_tag_idx').on(t.tag), index('channels_status_idx').on(t.status)]);
