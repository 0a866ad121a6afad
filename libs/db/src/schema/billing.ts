import { sqliteTable, integer, text, index, uniqueIndex } from 'drizzle-orm/sqlite-core';

/** The price set of the long-context tier (quota units per million tokens; audio prices do not change). */
export interface LongContextPrices {
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
  cacheWrite1h: number;
}

/** Per-model prices in quota units per million tokens (integers: no float touches money). */
export const prices = sqliteTable('prices', {
  model: text('model').primaryKey(),
  input: integer('input').notNull().default(0),
  output: integer('output').notNull().default(0),
  cacheRead: integer('cache_read').notNull().default(0),
  /** Prompt-cache writes with the 5-minute TTL (and writes whose TTL the upstream did not report). */
  cacheWrite: integer('cache_write').notNull().default(0),
  /** Prompt-cache writes with the 1-hour TTL; null = 8/5 of `cacheWrite`, rounded up (see tiers.ts oneHourWrite). */
  cacheWrite1h: integer('cache_write_1h'),
  /**
   * Long-context tier: when a request's input (uncached + cache reads + cache writes) exceeds this many
   * tokens, `longContext` prices apply to the whole request. Null = no tier. Set together with `longContext`.
   */
  longContextThreshold: integer('long_context_threshold'),
  longContext: text('long_context', { mode: 'json' }).$type<LongContextPrices>(),
  /** Realtime audio prices (text tokens use input/output, cached input uses cacheRead). */
  audioInput: integer('audio_input').notNull().default(0),
  audioOutput: integer('audio_output').notNull().default(0),
  /** Tokens the model can take in at most; null = BILLING_DEFAULT_CONTEXT_TOKENS. Bounds reservations and usage. */
  contextWindow: integer('context_window'),
  /** Quota units per web search (Anthropic's server tool, usage.server_tool_use.web_search_requests); null = BILLING_WEB_SEARCH_PRICE. */
  webSearch: integer('web_search'),
  /**
   * Quota units per code-execution call (Anthropic's code-execution server tool: a server_tool_use block named
   * code_execution, bash_code_execution or text_editor_code_execution); null = not priced: requests with the tool are refused.
   */
  codeExecution: integer('code_execution'),
  updatedAt: integer('updated_at').notNull(),
});

/** One row per billed unit of work (a /v1/messages request, a realtime response). */
export const usageLogs = sqliteTable('usage_logs', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  /** Unique: settling the same request twice is impossible by construction. */
  requestId: text('request_id').notNull(),
  kind: text('kind').notNull().default('messages'),
  userId: integer('user_id').notNull(),
  apiKeyId: integer('api_key_id').notNull(),
  channelId: integer('channel_id'),
  model: text('model').notNull(),
  upstreamModel: text('upstream_model').notNull().default(''),
  /** The model whose price was applied ('' on older rows and realtime: `model`). */
  billedModel: text('billed_model').notNull().default(''),
  /** The channel overrides that changed the request, a JSON list such as ["clamp:max_tokens","remove:temperature"]; '' = none. */
  overrides: text('overrides').notNull().default(''),
  stream: integer('stream', { mode: 'boolean' }).notNull().default(false),
  inputTokens: integer('input_tokens').notNull().default(0),
  outputTokens: integer('output_tokens').notNull().default(0),
  cacheReadTokens: integer('cache_read_tokens').notNull().default(0),
  /** All prompt-cache writes; the 5-minute ones are cacheWriteTokens - cacheWrite1hTokens (older rows: all of them). */
  cacheWriteTokens: integer('cache_write_tokens').notNull().default(0),
  /** The part of cacheWriteTokens written with the 1-hour TTL (never more than cacheWriteTokens). */
  cacheWrite1hTokens: integer('cache_write_1h_tokens').notNull().default(0),
  /** Billed at the model's long-context prices. */
  longContext: integer('long_context', { mode: 'boolean' }).notNull().default(false),
  audioInputTokens: integer('audio_input_tokens').notNull().default(0),
  audioOutputTokens: integer('audio_output_tokens').notNull().default(0),
  /** Web searches billed (usage.server_tool_use.web_search_requests, clamped to the request's max_uses). */
  webSearchRequests: integer('web_search_requests').notNull().default(0),
  /** Code-execution calls billed (server_tool_use blocks counted in the answer, clamped to CODE_EXECUTION_MAX_CALLS). */
  codeExecutionRequests: integer('code_execution_requests').notNull().default(0),
  cost: integer('cost').notNull().default(0),
  latencyMs: integer('latency_ms').notNull().default(0),
  ttftMs: integer('ttft_ms'),
  status: integer('status').notNull(),
  errorCode: text('error_code').notNull().default(''),
  /**
   * Why the billed usage is not exactly what the upstream reported ('' = it is): a comma list of
   * estimated | invalid | implausible | capped (see QuotaService).
   */
  usageFlag: text('usage_flag').notNull().default(''),
  attempts: integer('attempts').notNull().default(1),
  ip: text('ip').notNull().default(''),
  /** The requesting group and the price ratio (per-mille) applied to the cost. */
  group: text('group').notNull().default(''),
  priceRatio: integer('price_ratio').notNull().default(1000),
  createdAt: integer('created_at').notNull(),
}, (t) => [
  uniqueIndex('usage_logs_request_uq').on(t.requestId),
  index('usage_logs_user_idx').on(t.userId, t.createdAt),
  index('usage_logs_created_idx').on(t.createdAt),
  // Model-filtered statistics, listings and exports. Nearly free on insert (few models, each appended at
  // its own tail); key and channel indexes were measured and left out: small gains, or a real insert cost.
  index('usage_logs_model_idx').on(t.model, t.createdAt),
]);

/** Every change of a user's balance. `ref` + `kind` is unique so a credit or charge applies once. */
export const ledger = sqliteTable('ledger', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  userId: integer('user_id').notNull(),
  /** 'topup' | 'charge' | 'refund' | 'adjust' | 'redeem' */
  kind: text('kind').notNull(),
  /** Signed quota units. */
  amount: integer('amount').notNull(),
  balanceAfter: integer('balance_after').notNull(),
  ref: text('ref').notNull(),
  note: text('note').notNull().default(''),
  actorId: integer('actor_id'),
  createdAt: integer('created_at').notNull(),
}, (t) => [uniqueIndex('ledger_kind_ref_uq').on(t.kind, t.ref), index('ledger_user_idx').on(t.userId, t.id)]);
