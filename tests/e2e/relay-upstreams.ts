/**
 * Local upstream doubles for the relay tests (Anthropic Messages and OpenAI chat completions on
 * Bun.serve, port 0). Each request is answered by the next queued behaviour, or the default one:
 * JSON or SSE, HTTP errors (429/5xx), latency, streams held open or cut mid-way. (A refused
 * connection is a channel pointing at a closed port.)
 */
type Answer = { text?: string; usage?: Partial<Record<'input' | 'output' | 'cacheRead' | 'cacheWrite', number>>; delayMs?: number; tool?: { name: string; args: string } };
export type Behaviour =
  | ({ kind: 'ok' } & Answer)
  /** Streams the first SSE event, then keeps the response open until the client goes away. */
  | ({ kind: 'hold' } & Answer)
  /** Streams `afterChunks` SSE events, then fails the body. */
  | ({ kind: 'cut'; afterChunks: number } & Answer)
  | { kind: 'status'; status: number; retryAfter?: string };

export interface Upstream {
  url: string;
  kind: 'anthropic' | 'openai';
  hits: number;
  requests: Array<{ headers: Headers; body: any }>;
  queue: Behaviour[];
  fallback: Behaviour;
  stop(): void;
}

const sse = (ev: string | undefined, data: unknown) => `${ev ? `event: ${ev}\n` : ''}data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;

function anthropicEvents(b: Extract<Behaviour, { kind: 'ok' }>, model: string): string[] {
  const u = { input: 10, output: 5, cacheRead: 0, cacheWrite: 0, ...b.usage };
  const text = b.text ?? 'Hello there';
  return [
    sse('message_start', { type: 'message_start', message: { id: 'msg_up', type: 'message', role: 'assistant', model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: u.input, output_tokens: 1, cache_read_input_tokens: u.cacheRead, cache_creation_input_tokens: u.cacheWrite } } }),
    sse('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }),
    ...text.match(/.{1,4}/g)!.map((t) => sse('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: t } })),
    sse('content_block_stop', { type: 'content_block_stop', index: 0 }),
    sse('message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: u.output } }),
    sse('message_stop', { type: 'message_stop' }),
  ];
}

function openaiEvents(b: Extract<Behaviour, { kind: 'ok' }>, model: string): string[] {
  const u = { input: 10, output: 5, cacheRead: 0, cacheWrite: 0, ...b.usage };
  const base = { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model };
  const out = [sse(undefined, { ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] })];
  if (b.tool) {
    out.push(sse(undefined, { ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: b.tool.name, arguments: '' } }] }, finish_reason: null }] }));
    for (const piece of b.tool.args.match(/.{1,5}/g)!) out.push(sse(undefined, { ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: piece } }] }, finish_reason: null }] }));
    out.push(sse(undefined, { ...base, choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] }));
  } else {
    for (const t of (b.text ?? 'Hello there').match(/.{1,4}/g)!) out.push(sse(undefined, { ...base, choices: [{ index: 0, delta: { content: t }, finish_reason: null }] }));
    out.push(sse(undefined, { ...base, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }));
  }
  out.push(sse(undefined, { ...base, choices: [], usage: { prompt_tokens: u.input + u.cacheRead, completion_tokens: u.output, total_tokens: u.input + u.cacheRead + u.output, prompt_tokens_details: { cached_tokens: u.cacheRead } } }));
  out.push('data: [DONE]\n\n');
  return out;
}

function json(b: Extract<Behaviour, { kind: 'ok' }>, kind: Upstream['kind'], model: string): unknown {
  const u = { input: 10, output: 5, cacheRead: 0, cacheWrite: 0, ...b.usage };
  const text = b.text ?? 'Hello there';
  if (kind === 'anthropic') {
    return { id: 'msg_up', type: 'message', role: 'assistant', model, content: [{ type: 'text', text }], stop_reason: 'end_turn', stop_sequence: null,
      usage: { input_tokens: u.input, output_tokens: u.output, cache_read_input_tokens: u.cacheRead, cache_creation_input_tokens: u.cacheWrite } };
  }
  const message = b.tool
    ? { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: b.tool.name, arguments: b.tool.args } }] }
    : { role: 'assistant', content: text };
  return { id: 'chatcmpl-1', object: 'chat.completion', created: 1, model, choices: [{ index: 0, message, finish_reason: b.tool ? 'tool_calls' : 'stop' }],
    usage: { prompt_tokens: u.input + u.cacheRead, completion_tokens: u.output, total_tokens: u.input + u.output + u.cacheRead, prompt_tokens_details: { cached_tokens: u.cacheRead } } };
}

/** Starts a double on 127.0.0.1:0. */
export function startUpstream(kind: Upstream['kind'], fallback: Behaviour = { kind: 'ok' }): Upstream {
  const up: Upstream = { url: '', kind, hits: 0, requests: [], queue: [], fallback, stop: () => server.stop(true) };
  const enc = new TextEncoder();
  const server = Bun.serve({
    port: 0, hostname: '127.0.0.1', idleTimeout: 0,
    async fetch(req) {
      up.hits++;
      const body: any = req.method === "POST" ? await req.json().catch(() => null) : null;
      up.requests.push({ headers: req.headers, body });
      const b = up.queue.shift() ?? up.fallback;
      if (b.kind === 'status') {
        return Response.json({ type: 'error', error: { type: 'api_error', message: `double says ${b.status}` } }, { status: b.status, headers: b.retryAfter ? { 'retry-after': b.retryAfter } : {} });
      }
      if (new URL(req.url).pathname.endsWith('/count_tokens')) return Response.json({ input_tokens: 4242 });
      const model = body?.model ?? 'm';
      const ok: Extract<Behaviour, { kind: 'ok' }> = { ...b, kind: 'ok' };
      if (ok.delayMs) await Bun.sleep(ok.delayMs);
      if (!body?.stream) return Response.json(json(ok, kind, model));
      const events = kind === 'anthropic' ? anthropicEvents(ok, model) : openaiEvents(ok, model);
      const stream = new ReadableStream<Uint8Array>({
        async start(c) {
          if (b.kind === 'hold') { c.enqueue(enc.encode(events[0]!)); return; }
          for (let i = 0; i < events.length; i++) {
            if (b.kind === 'cut' && i === b.afterChunks) { c.error(new Error('cut')); return; }
            c.enqueue(enc.encode(events[i]!));
            await Bun.sleep(1);
          }
          c.close();
        },
      });
      return new Response(stream, { headers: { 'content-type': 'text/event-stream' } });
    },
  });
  up.url = `http://127.0.0.1:${server.port}`;
  return up;
}
