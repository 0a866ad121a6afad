/**
 * SSE helpers and the machinery shared by the upstream doubles (anthropic-upstream.ts, openai-upstream.ts):
 * a Bun.serve on port 0 that records requests and answers each by a scriptable plan. The default path has
 * no artificial delay, so relay tests and the benchmark can use the doubles as fast upstreams.
 */
import { SseParser, type SseEvent } from '@gw/formats';

export interface RecordedRequest {
  method: string;
  /** Path without the query string. */
  path: string;
  query: URLSearchParams;
  /** Lower-cased header names. */
  headers: Record<string, string>;
  rawBody: string;
  /** The parsed JSON body, or undefined when it is not JSON. */
  body: any;
}

/** How to answer one request. Every field is optional; `{}` is the default deterministic echo reply. */
export interface UpstreamPlan {
  /** Wait before sending the response headers (ms). */
  delayMs?: number;
  /** Close the connection without any response. */
  reset?: boolean;
  /**
   * Answer with the provider's error body. `retryAfter` sets the retry-after header (429s); `code` the OpenAI body's
   * `error.code` (default: OpenAI's own for the status; DeepSeek, for one, sends "invalid_request_error").
   */
  error?: { status: number; message?: string; type?: string; retryAfter?: number | string; headers?: Record<string, string>; code?: string | null };
  /** Reply text (default: "Echo: <last user text>"). Empty string → no text block. */
  text?: string;
  /**
   * Anthropic: server-side code-execution calls emitted before the reply text, as Anthropic's code-execution tool
   * answers: per call a `server_tool_use` block (`name` default code_execution; also bash_code_execution,
   * text_editor_code_execution) and its `<name>_tool_result` block. No usage count (Anthropic reports none).
   */
  codeExecution?: Array<{ name?: string; input?: unknown }>;
  /** Tool calls to emit (in order; two or more = parallel tool calls). */
  toolCalls?: Array<{ id?: string; name: string; input?: unknown }>;
  /** Anthropic stop_reason (the OpenAI double maps it to a finish_reason unless `finishReason` is set). */
  stopReason?: string;
  /** OpenAI finish_reason. */
  finishReason?: string;
  /** Anthropic-style usage: `input` is uncached input. Default: input from the request's length, output from the reply's. */
  usage?: { input?: number; output?: number; cacheRead?: number; cacheWrite?: number; cacheWrite1h?: number;
    /** Anthropic: usage.server_tool_use.web_search_requests (sent as given; streams: 0 in message_start, this in message_delta). */
    webSearch?: unknown };
  /** Force streaming on or off (default: the request's `stream`). */
  stream?: boolean;
  /** Streaming: wait between frames (ms). */
  chunkDelayMs?: number;
  /** OpenAI: reasoning text sent before the answer, on `reasoningField` (default reasoning_content). */
  reasoning?: string;
  reasoningField?: 'reasoning_content' | 'reasoning';
  /** Streaming: after this many frames, fall silent for `ms` once (a long think), then go on. */
  pause?: { afterFrames: number; ms: number };
  /** Streaming: send this many frames, then abort the body (a stream cut mid-way). */
  cutAfter?: number;
  /** OpenAI streaming: leave out the trailing usage chunk. */
  omitUsage?: boolean;
  /** OpenAI: answer a stream with exactly these SSE frames (each a whole `data: …\n\n`), for hostile or broken chunks. */
  rawFrames?: string[];
  /** OpenAI: answer with exactly this JSON body (status 200), for hostile or broken completions. */
  rawJson?: unknown;
  /** OpenAI streaming: leave out `data: [DONE]`. */
  omitDone?: boolean;
  /** Extra response headers. */
  headers?: Record<string, string>;
  /** Set by the double: called when the client cancels a streamed body (disconnects). */
  onCancel?: () => void;
  /** Escape hatch: answer with exactly this. */
  response?: () => Response | Promise<Response>;
}

/** Picks the plan for the n-th request (1-based); return nothing for the default. */
export type Script = (req: RecordedRequest, n: number) => UpstreamPlan | void | undefined;

export interface UpstreamDouble {
  /** Origin, e.g. `http://127.0.0.1:41234` (a channel base_url: no /v1). */
  url: string;
  /** Requests received, oldest first (bounded by `maxRecorded`). */
  requests: RecordedRequest[];
  /** Total requests received. */
  readonly count: number;
  /** Streamed responses the client stopped reading before their end (connection closed or fetch aborted). */
  readonly cancelled: number;
  /** Replaces the script; `null` restores the default reply. */
  script(fn: Script | null): void;
  stop(): Promise<void>;
}

export interface DoubleOptions {
  /** When set, requests without this key get the provider's 401. */
  apiKey?: string;
  /** Keep at most this many recorded requests (default 10,000); 0 records nothing (benchmarks). */
  maxRecorded?: number;
}

export type Handler = (req: RecordedRequest, plan: UpstreamPlan) => Response | Promise<Response>;

/** Starts a double; `handle` answers a request that is neither reset, delayed-out nor overridden. */
export function startDouble(opts: DoubleOptions, handle: Handler): UpstreamDouble {
  const maxRecorded = opts.maxRecorded ?? 10_000;
  const requests: RecordedRequest[] = [];
  let script: Script | null = null;
  let count = 0;
  let cancelled = 0;
  const server = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    idleTimeout: 30,
    async fetch(request) {
      const url = new URL(request.url);
      const rawBody = request.method === 'GET' || request.method === 'HEAD' ? '' : await request.text();
      let body: any;
      try { body = rawBody ? JSON.parse(rawBody) : undefined; } catch { body = undefined; }
      const headers: Record<string, string> = {};
      request.headers.forEach((v, k) => { headers[k] = v; });
      const rec: RecordedRequest = { method: request.method, path: url.pathname, query: url.searchParams, headers, rawBody, body };
      const n = ++count;
      if (maxRecorded > 0) {
        requests.push(rec);
        if (requests.length > maxRecorded) requests.shift();
      }
      const plan: UpstreamPlan = { ...script?.(rec, n), onCancel: () => { cancelled++; } };
      if (plan.delayMs) await Bun.sleep(plan.delayMs);
      if (plan.reset) return resetResponse();
      if (plan.response) return plan.response();
      return handle(rec, plan);
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}`,
    requests,
    get count() { return count; },
    get cancelled() { return cancelled; },
    script(fn) { script = fn; },
    async stop() { await server.stop(true); },
  };
}

// Bun logs the reason a response body errors with; an undefined reason aborts the socket silently.
const ABORT = undefined;

/** A response whose body fails before the first byte: the client sees the connection close with no response. */
export function resetResponse(): Response {
  return new Response(new ReadableStream({ start(c) { c.error(ABORT); } }));
}

/** An SSE response sending `frames` one by one, with optional delays and a cut after `cutAfter` frames. */
export function sseResponse(frames: string[], plan: UpstreamPlan, headers: Record<string, string> = {}): Response {
  const enc = new TextEncoder();
  const limit = plan.cutAfter ?? Infinity;
  const delay = plan.chunkDelayMs ?? 0;
  let i = 0;
  let paused = !plan.pause;
  const body = new ReadableStream<Uint8Array>({
    async pull(c) {
      if (!paused && i >= plan.pause!.afterFrames) {
        paused = true;
        await Bun.sleep(plan.pause!.ms);
      }
      if (i >= limit) {
        // Let the frames before the cut (and the headers) reach the socket first: an error closes it and drops what
        // is still buffered. 5 ms was not always enough on a loaded 2-core machine (a contract test then saw no text).
        await Bun.sleep(50);
        return c.error(ABORT);
      }
      if (i >= frames.length) return c.close();
      if (delay && i > 0) await Bun.sleep(delay);
      if (!delay) {
        const end = Math.min(frames.length, limit, paused ? Infinity : plan.pause!.afterFrames);
        c.enqueue(enc.encode(frames.slice(i, end).join(''))); // fast path: one write
        i = end;
        return;
      }
      c.enqueue(enc.encode(frames[i++]!));
    },
    cancel() {
      plan.onCancel?.();
    },
  });
  return new Response(body, { headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', ...headers, ...plan.headers } });
}

/** A JSON response. */
export function jsonResponse(body: unknown, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json', ...headers } });
}

/** Reads a whole SSE body into events (test helper). */
export async function readSse(body: Response | ReadableStream<Uint8Array>): Promise<SseEvent[]> {
  const stream = body instanceof Response ? body.body! : body;
  const parser = new SseParser();
  const out: SseEvent[] = [];
  for await (const chunk of stream) out.push(...parser.push(chunk));
  out.push(...parser.end());
  return out;
}

/** The text of the last user message of an Anthropic or OpenAI request (string or text blocks/parts). */
export function lastUserText(messages: any[] | undefined): string {
  const m = [...(messages ?? [])].reverse().find((x) => x?.role === 'user');
  if (!m) return '';
  if (typeof m.content === 'string') return m.content;
  return Array.isArray(m.content) ? m.content.filter((b: any) => b?.type === 'text').map((b: any) => b.text).join(' ') : '';
}

/** Deterministic token count used by the doubles' default usage: ceil(chars / 4), at least 1. */
export const doubleTokens = (text: string) => Math.max(1, Math.ceil(text.length / 4));

/** Splits a reply into a few stream pieces (by words, keeping spaces). */
export function pieces(text: string): string[] {
  return text.match(/\S+\s*|\s+/g) ?? [];
}
