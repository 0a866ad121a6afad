import { pgTable, integer, text, boolean, jsonb, index, uniqueIndex } from 'drizzle-orm/pg-core';
import { big, idColumn } from './columns';
import type { LongContextPrices } from '../schema/billing';

/** PostgreSQL twin of ../schema/billing.ts: same exports, property names and column names. */

export const prices = pgTable('prices', {
  model: text('model').primaryKey(),
  input: big('input').notNull().default(0),
  output: big('output').notNull().default(0),
  cacheRead: big('cache_read').notNull().default(0),
  cacheWrite: big('cache_write').notNull().default(0),
  cacheWrite1h: big('cache_write_1h'),
  longContextThreshold: big('long_context_threshold'),
  longContext: jsonb('long_context').$type<LongContextPrices>(),
  audioInput: big('audio_input').notNull().default(0),
  audioOutput: big('audio_output').notNull().default(0),
  contextWindow: integer('context_window'),
  webSearch: big('web_search'),
  codeExecution: big('code_execution'),
  updatedAt: big('updated_at').notNull(),
});

export const usageLogs = pgTable('usage_logs', {
  id: idColumn(),
  requestId: text('request_id').notNull(),
  kind: text('kind').notNull().default('messages'),
  userId: big('user_id').notNull(),
  apiKeyId: big('api_key_id').notNull(),
  channelId: big('channel_id'),
  model: text('model').notNull(),
  upstreamModel: text('upstream_model').notNull().default(''),
  billedModel: text('billed_model').notNull().default(''),
  overrides: text('overrides').notNull().default(''),
  stream: boolean('stream').notNull().default(false),
  inputTokens: big('input_tokens').notNull().default(0),
  outputTokens: big('output_tokens').notNull().default(0),
  cacheReadTokens: big('cache_read_tokens').notNull().default(0),
  cacheWriteTokens: big('cache_write_tokens').notNull().default(0),
  cacheWrite1hTokens: big('cache_write_1h_tokens').notNull().default(0),
  longContext: boolean('long_context').notNull().default(false),
  audioInputTokens: big('audio_input_tokens').notNull().default(0),
  audioOutputTokens: big('audio_output_tokens').notNull().default(0),
  webSearchRequests: big('web_search_requests').notNull().default(0),
  codeExecutionRequests: big('code_execution_requests').notNull().default(0),
  cost: big('cost').notNull().default(0),
  latencyMs: big('latency_ms').notNull().default(0),
  ttftMs: big('ttft_ms'),
  status: integer('status').notNull(),
  errorCode: text('error_code').notNull().default(''),
  usageFlag: text('usage_flag').notNull().default(''),
  attempts: integer('attempts').notNull().default(1),
  ip: text('ip').notNull().default(''),
  group: text('group').notNull().default(''),
  priceRatio: integer('price_ratio').notNull().default(1000),
  createdAt: big('created_at').notNull(),
}, (t) => [
  uniqueIndex('usage_logs_request_uq').on(t.requestId),
  index('usage_logs_user_idx').on(t.userId, t.createdAt),
  index('usage_logs_created_idx').on(t.createdAt),
  // Model-filtered statistics and listings (a year of one model: ~4x faster).
  index('usage_logs_model_idx').on(t.model, t.createdAt),
]);

export const ledger = pgTable('ledger', {
  id: idColumn(),
  userId: big('user_id').notNull(),
  kind: text('kind').notNull(),
  amount: big('amount').notNull(),
  balanceAfter: big('balance_after').notNull(),
  ref: text('ref').notNull(),
  note: text('note').notNull().default(''),
  actorId: big('actor_id'),
  createdAt: big('created_at').notNull(),
}, (t) => [uniqueIndex('ledger_kind_ref_uq').on(t.kind, t.ref), index('ledger_user_idx').on(t.userId, t.id)]);
