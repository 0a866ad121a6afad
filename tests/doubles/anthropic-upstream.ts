/**
 * A fake Anthropic API speaking the real wire format (as in Anthropic's Messages API): `POST /v1/messages` (JSON or SSE
 * with named events), `POST /v1/messages/count_tokens`, Anthropic error bodies. Scriptable per request
 * through `UpstreamPlan` (sse.ts).
 */
import {
  doubleTokens, jsonResponse, lastUserText, pieces, sseResponse, startDouble,
  type DoubleOptions, type RecordedRequest, type UpstreamDouble, type UpstreamPlan,
} from './sse';

export type { RecordedRequest, UpstreamPlan, UpstreamDouble } from './sse';

const ERROR_TYPES: Record<number, string> = {
  400: 'invalid_request_error', 401: 'authentication_error', 402: 'billing_error', 403: 'permission_error',
  404: 'not_found_error', 409: 'conflict_error', 413: 'request_too_large', 429: 'rate_limit_error',
  500: 'api_error', 504: 'timeout_error', 529: 'overloaded_error',
};

/** An Anthropic error response. */
export function anthropicError(status: number, message = 'Upstream double error', type = ERROR_TYPES[status] ?? (status >= 500 ? 'api_error' : 'invalid_request_error'), headers: Record<string, string> = {}): Response {
  return jsonResponse({ type: 'error', error: { type, message }, request_id: 'req_double' }, status, { 'request-id': 'req_double', ...headers });
}

const frame = (data: { type: string }) => `event: ${data.type}\ndata: ${JSON.stringify(data)}\n\n`;

interface Reply {
  blocks: Array<{ type: 'text'; text: string } | { type: 'tool_use' | 'server_tool_use'; id: string; name: string; input: unknown }
    | { type: string; tool_use_id: string; content: unknown }>;
  stopReason: string;
  usage: {
    input_tokens: number; output_tokens: number; cache_creation_input_tokens: number; cache_read_input_tokens: number;
    cache_creation?: { ephemeral_5m_input_tokens: number; ephemeral_1h_input_tokens: number };
    server_tool_use?: { web_search_requests: unknown };
    iterations?: Array<{ type: string; input_tokens: number; output_tokens: number }>;
  };
}

/**
 * Server-side compaction (`context_management.edits` with a `compact_*` edit, beta `compact-2026-01-12`), as
 * Anthropic reports it: an extra sampling step that reads the whole conversation and writes a summary, listed in
 * `usage.iterations` but left out of the top-level counts (which are the message iteration's). This double
 * compacts on every such request: the compaction reads 180,000 tokens and writes 3,500 (Anthropic's example).
 */
const COMPACTION = { input_tokens: 180_000, output_tokens: 3_500 };
const compacts = (body: any): boolean =>
  Array.isArray(body?.context_management?.edits) && body.context_management.edits.some((e: any) => /^\s*compact/i.test(String(e?.type ?? '')));

/**
 * Anthropic's prompt cache as this double models it (`DoubleOptions.promptCache`): a conversation is its
 * system prompt plus first message; the first request of one writes `promptCache` tokens to the cache
 * (1-hour TTL), every later one that reaches the SAME double reads them back.
 */
function cachedUsage(seen: Set<string>, req: RecordedRequest, tokens: number): NonNullable<UpstreamPlan['usage']> {
  const conv = JSON.stringify([req.body?.system ?? null, req.body?.messages?.[0] ?? null]);
  if (seen.has(conv)) return { cacheRead: tokens, cacheWrite: 0, cacheWrite1h: 0 };
  seen.add(conv);
  return { cacheRead: 0, cacheWrite: tokens, cacheWrite1h: tokens };
}

function reply(req: RecordedRequest, plan: UpstreamPlan): Reply {
  const text = plan.text ?? `Echo: ${lastUserText(req.body?.messages)}`;
  const blocks: Reply['blocks'] = [];
  // Code-execution calls come first (the model runs code, then answers), each followed by its result.
  (plan.codeExecution ?? []).forEach((c, i) => {
    const name = c.name ?? 'code_execution';
    const id = `srvtoolu_double_${i}`;
    blocks.push({ type: 'server_tool_use', id, name, input: c.input ?? { code: 'print(1)' } });
    blocks.push({ type: `${name}_tool_result`, tool_use_id: id, content: { type: `${name}_result`, stdout: '1\n', stderr: '', return_code: 0 } });
  });
  if (text) blocks.push({ type: 'text', text });
  (plan.toolCalls ?? []).forEach((t, i) => blocks.push({ type: 'tool_use', id: t.id ?? `toolu_double_${i}`, name: t.name, input: t.input ?? {} }));
  const u = plan.usage ?? {};
  return {
    blocks,
    stopReason: plan.stopReason ?? (plan.toolCalls?.length ? 'tool_use' : 'end_turn'),
    usage: {
      input_tokens: u.input ?? doubleTokens(JSON.stringify(req.body?.messages ?? []) + JSON.stringify(req.body?.system ?? '')),
      output_tokens: u.output ?? doubleTokens(text + (plan.toolCalls?.length ? JSON.stringify(plan.toolCalls) : '')),
      cache_creation_input_tokens: u.cacheWrite ?? 0,
      cache_read_input_tokens: u.cacheRead ?? 0,
      // The TTL split, as Anthropic reports it, when the plan names the 1-hour part.
      ...(u.cacheWrite1h !== undefined
        ? { cache_creation: { ephemeral_5m_input_tokens: (u.cacheWrite ?? 0) - u.cacheWrite1h, ephemeral_1h_input_tokens: u.cacheWrite1h } }
        : {}),
      ...(u.webSearch !== undefined ? { server_tool_use: { web_search_requests: u.webSearch } } : {}),
    },
  };
}

/**
 * The advisor tool (`advisor_20260301`, beta `advisor-tool-2026-03-01`) as Anthropic reports it: the executor
 * calls it once, the advisor model reads the transcript (40,000 tokens here) and answers (1,600 with its
 * thinking), an `advisor_message` iteration at the advisor's model and prices, outside the top-level counts.
 */
const ADVISOR = { input_tokens: 40_000, output_tokens: 1_600 };
const advisorOf = (body: any): any => (Array.isArray(body?.tools) ? body.tools.find((t: any) => /^\s*advisor/i.test(String(t?.type ?? ''))) : undefined);

/** Compaction and advisor calls, added the way Anthropic reports them: in `usage.iterations` only. */
function withIterations(req: RecordedRequest, r: Reply): Reply {
  const advisor = advisorOf(req.body);
  if (!compacts(req.body) && !advisor) return r;
  const message = { type: 'message', input_tokens: r.usage.input_tokens, output_tokens: r.usage.output_tokens };
  const iterations: Array<{ type: string; input_tokens: number; output_tokens: number }> = [];
  const blocks = [...r.blocks];
  if (compacts(req.body)) {
    iterations.push({ type: 'compaction', ...COMPACTION });
    blocks.unshift({ type: 'compaction', content: 'Summary of the conversation.' } as any);
  }
  if (advisor) iterations.push({ type: 'advisor_message', model: String(advisor.model ?? ''), ...ADVISOR } as any);
  iterations.push(message);
  return { ...r, blocks, usage: { ...r.usage, iterations } };
}

function streamFrames(id: string, model: string, r: Reply): string[] {
  const frames = [frame({
    type: 'message_start',
    message: { id, type: 'message', role: 'assistant', model, content: [], stop_reason: null, stop_sequence: null, usage: { ...r.usage, output_tokens: 1, ...(r.usage.server_tool_use ? { server_tool_use: { web_search_requests: 0 } } : {}) } },
  } as any)];
  r.blocks.forEach((b, index) => {
    if (b.type === 'text' && 'text' in b) {
      frames.push(frame({ type: 'content_block_start', index, content_block: { type: 'text', text: '' } } as any));
      if (index === 0) frames.push(frame({ type: 'ping' }));
      for (const p of pieces(b.text)) frames.push(frame({ type: 'content_block_delta', index, delta: { type: 'text_delta', text: p } } as any));
    } else if ('tool_use_id' in b || (b.type as string) === 'compaction') {
      // A server tool's result arrives whole in its content_block_start, as Anthropic streams it.
      frames.push(frame({ type: 'content_block_start', index, content_block: b } as any));
    } else if ('name' in b) {
      frames.push(frame({ type: 'content_block_start', index, content_block: { type: b.type, id: b.id, name: b.name, input: {} } } as any));
      const json = JSON.stringify(b.input);
      const half = Math.ceil(json.length / 2);
      for (const p of ['', json.slice(0, half), json.slice(half)]) frames.push(frame({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: p } } as any));
    }
    frames.push(frame({ type: 'content_block_stop', index } as any));
  });
  frames.push(frame({ type: 'message_delta', delta: { stop_reason: r.stopReason, stop_sequence: null }, usage: r.usage } as any));
  frames.push(frame({ type: 'message_stop' }));
  return frames;
}

let seq = 0;

/** Starts a fake Anthropic upstream on a random port. */
export function startAnthropicUpstream(opts: DoubleOptions & { promptCache?: number } = {}): UpstreamDouble {
  const cache = new Set<string>();
  return startDouble(opts, (req, plan) => {
    if (opts.promptCache && req.path === '/v1/messages') plan = { ...plan, usage: { ...cachedUsage(cache, req, opts.promptCache), ...plan.usage } };
    if (req.method !== 'POST') return anthropicError(404, 'Not found');
    if (opts.apiKey !== undefined && req.headers['x-api-key'] !== opts.apiKey) return anthropicError(401, 'invalid x-api-key');
    if (!req.headers['anthropic-version']) return anthropicError(400, 'anthropic-version: header is required');
    if (req.body === undefined) return anthropicError(400, 'Invalid JSON body');
    if (plan.error) {
      const e = plan.error;
      return anthropicError(e.status, e.message, e.type, { ...(e.retryAfter !== undefined ? { 'retry-after': String(e.retryAfter) } : {}), ...e.headers });
    }
    if (req.path === '/v1/messages/count_tokens') {
      return jsonResponse({ input_tokens: plan.usage?.input ?? doubleTokens(JSON.stringify(req.body.messages ?? []) + JSON.stringify(req.body.system ?? '')) });
    }
    if (req.path !== '/v1/messages') return anthropicError(404, `Not found: ${req.path}`);
    const r = withIterations(req, reply(req, plan));
    const id = `msg_double_${++seq}`;
    const model = String(req.body.model);
    const headers = { 'request-id': `req_double_${seq}`, ...plan.headers };
    if (plan.stream ?? req.body.stream === true) return sseResponse(streamFrames(id, model, r), plan, headers);
    return jsonResponse({ id, type: 'message', role: 'assistant', model, content: r.blocks, stop_reason: r.stopReason, stop_sequence: null, usage: { ...r.usage, service_tier: 'standard' } }, 200, headers);
  });
}
