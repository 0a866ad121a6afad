/**
 * Channel shapes on the wire, as TypeBox schemas: routes validate bodies with them and the OpenAPI
 * document is generated from them, so the two never disagree.
 */
import { IdInput } from '@gw/core/id-input';
import { Type, type Static } from '@sinclair/typebox';
import { HeaderPolicySchema } from './header-policy';
import { FailureRulesSchema } from './failure-rules';
import { BillingModelSchema, OverridesSchema } from './overrides';
import { REASONING_ECHO_MODES } from '@gw/providers';

export const CHANNEL_TYPES = ['anthropic', 'openai', 'openai-legacy'] as const;
export type ChannelType = (typeof CHANNEL_TYPES)[number];

const ChannelTypeSchema = Type.Union(CHANNEL_TYPES.map((v) => Type.Literal(v)), {
  description: "Adapter: 'anthropic' (Messages API), 'openai' (OpenAI-compatible chat completions and realtime) or 'openai-legacy' (older OpenAI-compatible servers that only know max_tokens; no realtime)",
  error: "must be 'anthropic', 'openai' or 'openai-legacy'",
});
const Name = Type.String({ minLength: 1, maxLength: 128, description: 'Display name' });
const BaseUrl = Type.String({ minLength: 1, maxLength: 2048, description: 'Upstream origin without /v1, e.g. https://api.anthropic.com' });
const Models = Type.Array(Type.String({ minLength: 1, maxLength: 200 }), { minItems: 1, maxItems: 1000, description: 'Models this channel serves (non-empty)' });
const ModelMapping = Type.Record(Type.String({ minLength: 1, maxLength: 200 }), Type.String({ minLength: 1, maxLength: 200 }), {
  description: 'Requested model → upstream model',
});
const Group = Type.String({ minLength: 1, maxLength: 512, pattern: '^[A-Za-z0-9_-]+(,[A-Za-z0-9_-]+)*$', description: "Comma-separated user groups allowed to use it (default 'default')", error: 'must be comma-separated names of letters, digits, _ or -' });
const Tag = Type.String({ maxLength: 64, description: 'Free-form tag for batch enable/disable' });
const Priority = Type.Integer({ minimum: -1_000_000, maximum: 1_000_000, description: 'Higher is tried first' });
const Weight = Type.Integer({ minimum: 1, maximum: 10_000, description: 'Share among channels of equal priority' });
const WritableStatus = Type.Union([Type.Literal(1), Type.Literal(2)], { description: '1 enabled, 2 manually disabled', error: 'must be 1 (enabled) or 2 (disabled)' });
const TimeoutMs = Type.Integer({ minimum: 1000, maximum: 3_600_000, description: 'Upstream request timeout in milliseconds' });
const Headers = Type.Record(Type.String({ minLength: 1, maxLength: 128 }), Type.String({ maxLength: 4096 }), {
  description: 'Extra headers sent upstream (no hop-by-hop or credential headers)',
});
const Key = Type.String({ maxLength: 8192, description: 'Upstream API key; write-only (masked on read)' });
const KeySelection = Type.Union([Type.Literal('random'), Type.Literal('round_robin')], { description: "How a request picks one of the channel's usable keys (default 'random')", error: "must be 'random' or 'round_robin'" });
const FirstByteTimeoutMs = Type.Union([Type.Integer({ minimum: 100, maximum: 3_600_000 }), Type.Null()], { description: "Longest wait for the upstream's first byte (response headers, and the first chunk of a stream) before the request fails over; null = only timeout_ms" });
const ProbeIntervalMs = Type.Union([Type.Integer({ minimum: 1000, maximum: 86_400_000 }), Type.Null()], { description: 'How often this channel (or its keys) is probed while auto-disabled; null = RELAY_PROBE_INTERVAL_MS' });
const ReasoningEchoSchema = Type.Union(REASONING_ECHO_MODES.map((v) => Type.Literal(v)), {
  description: "openai and openai-legacy channels: send thinking blocks the gateway produced (signature \"\") back as the assistant message's reasoning_content, as DeepSeek's and Kimi's thinking models need within a tool loop. 'auto' (default): only to api.deepseek.com, api.moonshot.ai and api.moonshot.cn; 'always'; 'never' (OpenAI and other strict servers refuse the field). No effect on anthropic channels",
  error: "must be 'auto', 'always' or 'never'",
});
const ExtraKeys = Type.Array(Type.String({ minLength: 1, maxLength: 8192 }), { maxItems: 99, description: 'More upstream keys, after `key` (write-only)' });

/** Body of POST /api/channel/. */
export const ChannelCreate = Type.Object({
  name: Name,
  type: ChannelTypeSchema,
  base_url: BaseUrl,
  key: Type.String({ minLength: 1, maxLength: 8192, description: 'Upstream API key; write-only (masked on read)' }),
  models: Models,
  model_mapping: Type.Optional(ModelMapping),
  group: Type.Optional(Group),
  tag: Type.Optional(Tag),
  priority: Type.Optional(Priority),
  weight: Type.Optional(Weight),
  status: Type.Optional(WritableStatus),
  timeout_ms: Type.Optional(TimeoutMs),
  headers: Type.Optional(Headers),
  header_policy: Type.Optional(HeaderPolicySchema),
  keys: Type.Optional(ExtraKeys),
  key_selection: Type.Optional(KeySelection),
  failure_rules: Type.Optional(FailureRulesSchema),
  first_byte_timeout_ms: Type.Optional(FirstByteTimeoutMs),
  probe_interval_ms: Type.Optional(ProbeIntervalMs),
  overrides: Type.Optional(OverridesSchema),
  billing_model: Type.Optional(BillingModelSchema),
  reasoning_echo: Type.Optional(ReasoningEchoSchema),
});
export type ChannelCreate = Static<typeof ChannelCreate>;

/**
 * Body of PUT /api/channel/: `id` plus any subset of the create fields (derived from ChannelCreate, so
 * the two cannot drift); `key` omitted or "" keeps the stored key.
 */
export const ChannelUpdate = Type.Composite([
  Type.Object({ id: IdInput() }),
  Type.Partial(Type.Omit(ChannelCreate, ['key', 'keys'])),
  Type.Object({ key: Type.Optional(Key) }),
]);
export type ChannelUpdate = Static<typeof ChannelUpdate>;

/** A channel as the API returns it: the key masked, plus read-only health fields. */
export const ChannelView = Type.Object({
  id: Type.Integer(),
  name: Type.String(),
  type: Type.String(),
  base_url: Type.String(),
  key: Type.String({ description: 'Masked' }),
  models: Type.Array(Type.String()),
  model_mapping: Type.Record(Type.String(), Type.String()),
  group: Type.String(),
  tag: Type.String(),
  priority: Type.Integer(),
  weight: Type.Integer(),
  status: Type.Integer({ description: '1 enabled, 2 manually disabled, 3 auto-disabled' }),
  status_reason: Type.String(),
  timeout_ms: Type.Integer(),
  headers: Type.Record(Type.String(), Type.String()),
  header_policy: Type.Required(HeaderPolicySchema),
  key_selection: Type.String(),
  key_count: Type.Integer({ description: 'Upstream keys the channel holds' }),
  usable_keys: Type.Integer({ description: 'Keys that are enabled' }),
  failure_rules: FailureRulesSchema,
  first_byte_timeout_ms: Type.Union([Type.Integer(), Type.Null()]),
  probe_interval_ms: Type.Union([Type.Integer(), Type.Null()]),
  overrides: OverridesSchema,
  billing_model: Type.String({ description: "'requested' or 'upstream'" }),
  reasoning_echo: Type.String({ description: "'auto', 'always' or 'never'" }),
  response_time_ms: Type.Integer(),
  tested_at: Type.Union([Type.Integer(), Type.Null()]),
  created_at: Type.Integer(),
  updated_at: Type.Integer(),
});
export type ChannelView = Static<typeof ChannelView>;

/** Result of POST /api/channel/:id/test. */
export const ChannelTestResult = Type.Object({
  success: Type.Boolean(),
  response_time_ms: Type.Integer(),
  status: Type.Integer({ description: 'Upstream HTTP status (0 when unreachable)' }),
  message: Type.String(),
  tested_at: Type.Integer(),
});
export type ChannelTestResult = Static<typeof ChannelTestResult>;

/** One upstream key as the API shows it: masked, with its status and in-memory counters. */
export const ChannelKeyView = Type.Object({
  id: Type.Integer(),
  key: Type.String({ description: 'Masked' }),
  status: Type.Integer({ description: '1 enabled, 2 disabled by an operator, 3 auto-disabled' }),
  reason: Type.String({ description: 'Why it is disabled' }),
  disabled_at: Type.Union([Type.Integer(), Type.Null()]),
  created_at: Type.Integer(),
  requests: Type.Integer({ description: 'Upstream requests made with it since the process started' }),
  failures: Type.Integer({ description: 'Of which failed for the upstream\'s reasons' }),
  last_used_at: Type.Union([Type.Integer(), Type.Null()]),
});
export type ChannelKeyView = Static<typeof ChannelKeyView>;

/** Body of POST /api/channel/:id/keys. */
export const ChannelKeysAdd = Type.Object({
  keys: Type.Array(Type.String({ minLength: 1, maxLength: 8192 }), { minItems: 1, maxItems: 100, description: 'Upstream keys to add (write-only)' }),
});
export type ChannelKeysAdd = Static<typeof ChannelKeysAdd>;
