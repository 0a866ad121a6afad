import type { UsageLogRow } from '@gw/db';
import { Type, type Static } from '@sinclair/typebox';

const int = (description: string) => Type.Integer({ description });
const nullableInt = (description: string) => Type.Union([Type.Integer(), Type.Null()], { description });

/** One usage log record as /api/log/ returns it. */
export const UsageLogView = Type.Object({
  id: int('Row id.'),
  request_id: Type.String({ description: 'The request-id the client saw.' }),
  kind: Type.String({ description: 'messages or realtime.' }),
  user_id: int('Owner of the key.'),
  api_key_id: nullableInt('Relay API key used; null on rows of root or another admin for an admin below root (their keys are not shown to it anywhere).'),
  channel_id: nullableInt('Channel that served it (null when none did, or for non-admin callers).'),
  model: Type.String({ description: 'Model the client asked for.' }),
  upstream_model: Type.String({ description: 'Model name sent upstream after mapping.' }),
  billed_model: Type.String({ description: "The model whose price was applied: `model`, or `upstream_model` when the channel bills the upstream model (its `billing_model`)." }),
  overrides: Type.Array(Type.String(), { description: 'Channel overrides that changed the request, as op:target (e.g. "clamp:max_tokens", "remove:temperature", "set_header:x-foo"); [] = none.' }),
  stream: Type.Boolean(),
  input_tokens: int('Uncached input tokens.'),
  output_tokens: int('Output tokens.'),
  cache_read_tokens: int('Prompt-cache read tokens.'),
  cache_write_tokens: int('Prompt-cache write tokens, both TTLs (= cache_write_5m_tokens + cache_write_1h_tokens).'),
  cache_write_5m_tokens: int('Prompt-cache writes with the 5-minute TTL (or an unreported one), billed at cache_write.'),
  cache_write_1h_tokens: int('Prompt-cache writes with the 1-hour TTL, billed at cache_write_1h.'),
  long_context: Type.Boolean({ description: "Billed at the model's long-context prices." }),
  audio_input_tokens: int('Realtime audio input tokens.'),
  audio_output_tokens: int('Realtime audio output tokens.'),
  web_search_requests: int('Web searches billed (Anthropic\'s usage.server_tool_use.web_search_requests, clamped to the request\'s max_uses), each at the price\'s web_search.'),
  code_execution_requests: int('Code-execution calls billed (server_tool_use blocks named code_execution, bash_code_execution or text_editor_code_execution in the answer, clamped to CODE_EXECUTION_MAX_CALLS), each at the price\'s code_execution.'),
  cost: int('Quota units charged.'),
  group: Type.String({ description: 'The requesting group (the key\'s, else its owner\'s); "" on rows older than groups.' }),
  price_ratio: int('Price ratio applied, per-mille (1000 = x1).'),
  latency_ms: int('Total time to the last byte.'),
  ttft_ms: nullableInt('Time to the first byte sent to the client.'),
  status: int('HTTP status the client got (200 also for a stream that later failed; see error_code).'),
  error_code: Type.String({ description: 'Machine code of the failure, "" on success.' }),
  usage_flag: Type.String({ description: 'Why the billed usage differs from what the upstream reported ("" = it does not): a comma list of estimated, invalid, implausible, capped.' }),
  attempts: int('Upstream attempts (channels tried).'),
  ip: Type.String({ description: "Client address (behind TRUST_PROXY the forwarded one when it names an address, else the proxy's)." }),
  created_at: int('Unix seconds.'),
});
export type UsageLogView = Static<typeof UsageLogView>;

/**
 * Who reads usage logs: `admin` sees which channel served each request; `keyHidden(userId)` true hides the key id
 * of that user's rows (an admin below root reading rows of root or another admin, whose key ids answer it 404
 * everywhere else).
 */
export interface UsageLogReader { admin: boolean; keyHidden?: (userId: number) => boolean }

export function toUsageLogView(r: UsageLogRow, reader: UsageLogReader): UsageLogView {
  const admin = reader.admin;
  return {
    id: r.id, request_id: r.requestId, kind: r.kind, user_id: r.userId, api_key_id: reader.keyHidden?.(r.userId) ? null : r.apiKeyId,
    channel_id: admin ? r.channelId : null, model: r.model, upstream_model: admin ? r.upstreamModel : '',
    billed_model: r.billedModel || r.model, overrides: admin ? parseList(r.overrides) : [], stream: r.stream,
    input_tokens: r.inputTokens, output_tokens: r.outputTokens, cache_read_tokens: r.cacheReadTokens,
    cache_write_tokens: r.cacheWriteTokens, cache_write_5m_tokens: r.cacheWriteTokens - r.cacheWrite1hTokens,
    cache_write_1h_tokens: r.cacheWrite1hTokens, long_context: r.longContext, audio_input_tokens: r.audioInputTokens, audio_output_tokens: r.audioOutputTokens,
    web_search_requests: r.webSearchRequests, code_execution_requests: r.codeExecutionRequests, cost: r.cost, group: r.group, price_ratio: r.priceRatio, latency_ms: r.latencyMs, ttft_ms: r.ttftMs, status: r.status, error_code: r.errorCode, usage_flag: r.usageFlag,
    attempts: r.attempts, ip: r.ip, created_at: r.createdAt,
  };
}

/** The stored JSON list ('' = none); a damaged value shows as [] rather than failing the listing. */
function parseList(s: string): string[] {
  if (!s) return [];
  try {
    const v = JSON.parse(s);
    return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];
  } catch {
    return [];
  }
}
