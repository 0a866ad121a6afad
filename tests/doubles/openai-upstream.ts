/**
 * A fake OpenAI Chat Completions API speaking the real wire format (as in OpenAI's Chat Completions API): JSON completions,
 * SSE chunks ending with a `choices: []` usage chunk (when `stream_options.include_usage`) and
 * `data: [DONE]`, tool-call deltas by index, OpenAI error bodies. Scriptable through `UpstreamPlan`.
 */
import {
  doubleTokens, jsonResponse, lastUserText, pieces, sseResponse, startDouble,
  type DoubleOptions, type RecordedRequest, type UpstreamDouble, type UpstreamPlan,
} from './sse';

export type { RecordedRequest, UpstreamPlan, UpstreamDouble } from './sse';

const ERROR_TYPES: Record<number, [string, string | null]> = {
  400: ['invalid_request_error', null], 401: ['invalid_request_error', 'invalid_api_key'], 403: ['invalid_request_error', 'unsupported_country_region_territory'],
  404: ['invalid_request_error', 'model_not_found'], 429: ['requests', 'rate_limit_exceeded'], 500: ['server_error', null], 503: ['server_error', null],
};

/** An OpenAI error response. */
export function openaiError(status: number, message = 'Upstream double error', type?: string, headers: Record<string, string> = {}, code?: string | null): Response {
  const [t, c] = ERROR_TYPES[status] ?? [status >= 500 ? 'server_error' : 'invalid_request_error', null];
  return jsonResponse({ error: { message, type: type ?? t, param: null, code: code === undefined ? c : code } }, status, headers);
}

const FINISH: Record<string, string> = { end_turn: 'stop', stop_sequence: 'stop', max_tokens: 'length', tool_use: 'tool_calls', refusal: 'content_filter' };

interface Reply {
  text: string;
  calls: Array<{ id: string; name: string; arguments: string }>;
  finish: string;
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number; prompt_tokens_details: { cached_tokens: number; cache_write_tokens?: number } };
}

function reply(req: RecordedRequest, plan: UpstreamPlan): Reply {
  const text = plan.text ?? `Echo: ${lastUserText(req.body?.messages)}`;
  const calls = (plan.toolCalls ?? []).map((t, i) => ({ id: t.id ?? `call_double_${i}`, name: t.name, arguments: JSON.stringify(t.input ?? {}) }));
  const u = plan.usage ?? {};
  const input = u.input ?? doubleTokens(JSON.stringify(req.body?.messages ?? []));
  const cacheRead = u.cacheRead ?? 0;
  const cacheWrite = u.cacheWrite ?? 0;
  const output = u.output ?? doubleTokens(text + calls.map((c) => c.arguments).join(''));
  const prompt = input + cacheRead + cacheWrite; // OpenAI's prompt_tokens includes cached tokens
  const details: Reply['usage']['prompt_tokens_details'] = { cached_tokens: cacheRead };
  if (cacheWrite) details.cache_write_tokens = cacheWrite;
  return {
    text, calls,
    finish: plan.finishReason ?? FINISH[plan.stopReason ?? ''] ?? (calls.length ? 'tool_calls' : 'stop'),
    usage: { prompt_tokens: prompt, completion_tokens: output, total_tokens: prompt + output, prompt_tokens_details: details },
  };
}

let seq = 0;

function streamFrames(id: string, model: string, r: Reply, req: RecordedRequest, plan: UpstreamPlan): string[] {
  const includeUsage = req.body?.stream_options?.include_usage === true && !plan.omitUsage;
  const chunk = (delta: object, finish: string | null = null) =>
    `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1_700_000_000, model, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...(includeUsage ? { usage: null } : {}) })}\n\n`;
  const frames = [chunk({ role: 'assistant', content: '', refusal: null })];
  if (plan.reasoning) for (const p of pieces(plan.reasoning)) frames.push(chunk({ [plan.reasoningField ?? 'reasoning_content']: p }));
  for (const p of pieces(r.text)) frames.push(chunk({ content: p }));
  r.calls.forEach((c, index) => {
    frames.push(chunk({ tool_calls: [{ index, id: c.id, type: 'function', function: { name: c.name, arguments: '' } }] }));
    const half = Math.ceil(c.arguments.length / 2);
    for (const p of [c.arguments.slice(0, half), c.arguments.slice(half)]) frames.push(chunk({ tool_calls: [{ index, function: { arguments: p } }] }));
  });
  frames.push(chunk({}, r.finish));
  if (includeUsage) frames.push(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1_700_000_000, model, choices: [], usage: r.usage })}\n\n`);
  if (!plan.omitDone) frames.push('data: [DONE]\n\n');
  return frames;
}

/** How strictly the double checks the messages it is sent, as some real upstreams do. */
export interface OpenAIDoubleOptions extends DoubleOptions {
  /** DeepSeek's thinking mode: an assistant message with tool calls and no `reasoning_content` is a 400. */
  requireReasoningEcho?: boolean;
  /** OpenAI's own API: a message field it does not know (e.g. `reasoning_content`) is a 400. */
  strictMessages?: boolean;
  /** Older Azure OpenAI api-versions (and some proxies): a request with `stream_options` is a 400. */
  refuseStreamOptions?: boolean;
}

/** The message fields OpenAI's Chat Completions API accepts, by role. */
const MESSAGE_FIELDS: Record<string, readonly string[]> = {
  system: ['role', 'content', 'name'], developer: ['role', 'content', 'name'], user: ['role', 'content', 'name'],
  assistant: ['role', 'content', 'name', 'refusal', 'audio', 'tool_calls', 'function_call'], tool: ['role', 'content', 'tool_call_id'],
};

/** The 400 a strict upstream gives these messages, or null. */
function refuseMessages(messages: unknown, opts: OpenAIDoubleOptions): Response | null {
  if (!Array.isArray(messages)) return null;
  for (const [i, m] of messages.entries()) {
    if (opts.strictMessages) {
      const unknown = Object.keys(m ?? {}).find((k) => !(MESSAGE_FIELDS[m?.role] ?? []).includes(k));
      if (unknown) return openaiError(400, `Additional properties are not allowed ('${unknown}' was unexpected) - 'messages.${i}'`);
    }
    if (opts.requireReasoningEcho && m?.role === 'assistant' && Array.isArray(m.tool_calls) && m.tool_calls.length && typeof m.reasoning_content !== 'string') {
      return openaiError(400, `Missing \`reasoning_content\` field in the assistant message at message index ${i}.`);
    }
  }
  return null;
}

/** Starts a fake OpenAI-compatible upstream on a random port. */
export function startOpenAIUpstream(opts: OpenAIDoubleOptions = {}): UpstreamDouble {
  return startDouble(opts, (req, plan) => {
    if (opts.apiKey !== undefined && req.headers.authorization !== `Bearer ${opts.apiKey}`) return openaiError(401, 'Incorrect API key provided.');
    if (req.method !== 'POST' || req.path !== '/v1/chat/completions') return openaiError(404, `Unknown request URL: ${req.method} ${req.path}`);
    if (req.body === undefined) return openaiError(400, 'We could not parse the JSON body of your request.');
    if (opts.refuseStreamOptions && req.body.stream_options !== undefined) return openaiError(400, 'Unrecognized request argument supplied: stream_options');
    const refused = refuseMessages(req.body.messages, opts);
    if (refused) return refused;
    if (plan.error) {
      const e = plan.error;
      return openaiError(e.status, e.message, e.type, e.retryAfter !== undefined ? { 'retry-after': String(e.retryAfter) } : {}, e.code);
    }
    if (plan.rawFrames) return sseResponse(plan.rawFrames, plan);
    if (plan.rawJson !== undefined) return jsonResponse(plan.rawJson, 200, plan.headers);
    const r = reply(req, plan);
    const id = `chatcmpl-double${++seq}`;
    const model = String(req.body.model);
    if (plan.stream ?? req.body.stream === true) return sseResponse(streamFrames(id, model, r, req, plan), plan);
    const message: Record<string, unknown> = { role: 'assistant', content: r.text || null, refusal: null };
    if (plan.reasoning) message[plan.reasoningField ?? 'reasoning_content'] = plan.reasoning;
    if (r.calls.length) message.tool_calls = r.calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }));
    return jsonResponse({
      id, object: 'chat.completion', created: 1_700_000_000, model,
      choices: [{ index: 0, message, logprobs: null, finish_reason: r.finish }],
      usage: r.usage,
    }, 200, plan.headers);
  });
}
