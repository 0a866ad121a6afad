/**
 * Interim provider adapters built directly on @gw/formats, used until @gw/providers lands its
 * registry; `relayAdapter(type)` is the only thing the rest of the relay calls.
 */
import { GatewayError, newMessageId } from '@gw/core';
import {
  ChatStreamTranslator, SseParser, encodeAnthropicEvent, estimateRequestTokens, fromOpenAICompletion, toOpenAIRequest, zeroUsage,
  type ChatCompletion, type ChatCompletionChunk, type Usage,
} from '@gw/formats';
import type { RelayAdapter, StreamResult, UpstreamTarget } from './adapter';

const join = (base: string, path: string) => base.replace(/\/+$/, '') + path;

function classify(input: { status?: number; body?: string; headers?: Headers; error?: unknown }): { retryable: boolean; error: GatewayError } {
  if (input.status === undefined) {
    const timeout = (input.error as Error)?.name === 'TimeoutError';
    return { retryable: true, error: new GatewayError(timeout ? 504 : 502, timeout ? 'upstream_timeout' : 'upstream_unreachable', timeout ? 'The upstream did not answer in time' : 'The upstream could not be reached') };
  }
  const s = input.status;
  let message = `Upstream error (HTTP ${s})`;
  try {
    const j = JSON.parse(input.body ?? '');
    message = j?.error?.message ?? message;
  } catch { /* not JSON */ }
  if (s === 429) {
    const ra = input.headers?.get('retry-after');
    return { retryable: true, error: new GatewayError(429, 'upstream_rate_limited', message, ra ? { headers: { 'retry-after': ra } } : {}) };
  }
  if (s >= 500 || s === 408) return { retryable: true, error: new GatewayError(s === 529 || s === 503 ? 503 : 502, 'upstream_error', message, { type: s === 529 || s === 503 ? 'overloaded_error' : 'api_error' }) };
  // The channel's own credentials are wrong: another channel may work, and the client did nothing wrong.
  if (s === 401 || s === 403) return { retryable: true, error: new GatewayError(502, 'upstream_auth_failed', 'The upstream refused the gateway credentials') };
  return { retryable: false, error: new GatewayError(s >= 400 && s < 500 ? s : 502, 'upstream_rejected', message) };
}

const anthropicHeaders = (t: UpstreamTarget, client: Headers) => {
  const h: Record<string, string> = { 'content-type': 'application/json', 'x-api-key': t.apiKey, 'anthropic-version': client.get('anthropic-version') ?? '2023-06-01', ...t.headers };
  const beta = client.get('anthropic-beta');
  if (beta) h['anthropic-beta'] = beta;
  return h;
};

const anthropic: RelayAdapter = {
  buildRequest(t, body, o) {
    return new Request(join(t.baseUrl, '/v1/messages'), { method: 'POST', headers: anthropicHeaders(t, o.clientHeaders), body: JSON.stringify({ ...body, model: t.upstreamModel, stream: o.stream }) });
  },
  decodeResponse(json, o) {
    const m = json as Record<string, any>;
    return { message: { ...m, model: o.requestedModel }, usage: { ...zeroUsage(), ...(m.usage ?? {}) } };
  },
  streamDecoder(o) {
    const parser = new SseParser();
    const enc = new TextEncoder();
    let usage: Usage | null = null;
    let outTokens = 0;
    let chars = 0;
    let complete = false;
    let failed = false;
    let stop: StreamResult['stopReason'] = null;
    const transform = new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, c) {
        let out = '';
        for (const ev of parser.push(chunk)) {
          let data: any;
          try { data = JSON.parse(ev.data); } catch { continue; }
          if (data.type === 'message_start') {
            data.message.model = o.requestedModel;
            usage = { ...zeroUsage(), ...(data.message.usage ?? {}) };
          } else if (data.type === 'message_delta') {
            usage = { ...(usage ?? zeroUsage()), ...Object.fromEntries(Object.entries(data.usage ?? {}).filter(([, v]) => v !== null)) } as Usage;
            outTokens = usage.output_tokens;
            stop = data.delta?.stop_reason ?? stop;
          } else if (data.type === 'content_block_delta') {
            chars += String(data.delta?.text ?? data.delta?.partial_json ?? data.delta?.thinking ?? '').length;
          } else if (data.type === 'message_stop') complete = true;
          else if (data.type === 'error') failed = true;
          out += encodeAnthropicEvent(data);
        }
        if (out) c.enqueue(enc.encode(out));
      },
    });
    return {
      transform,
      result: () => {
        const est = { ...(usage ?? { ...zeroUsage(), input_tokens: o.inputTokens }) };
        if (!complete && outTokens === 0) est.output_tokens = Math.ceil(chars / 4);
        return { usage: complete ? usage : null, estimatedUsage: est, stopReason: stop, complete, failed };
      },
    };
  },
  classify,
  async countTokens(t, body, client, signal) {
    const res = await fetch(join(t.baseUrl, '/v1/messages/count_tokens'), { method: 'POST', headers: anthropicHeaders(t, client), body: JSON.stringify({ ...body, model: t.upstreamModel }), signal });
    if (!res.ok) return null;
    const j = (await res.json()) as { input_tokens?: number };
    return typeof j.input_tokens === 'number' ? j.input_tokens : null;
  },
};

const openai: RelayAdapter = {
  buildRequest(t, body, o) {
    const req = toOpenAIRequest(body, { model: t.upstreamModel });
    const payload = o.stream ? { ...req, stream: true, stream_options: { include_usage: true } } : { ...req, stream: false };
    return new Request(join(t.baseUrl, '/v1/chat/completions'), { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${t.apiKey}`, ...t.headers }, body: JSON.stringify(payload) });
  },
  decodeResponse(json, o) {
    const r = fromOpenAICompletion(json as ChatCompletion, { requestedModel: o.requestedModel, stopSequences: o.body.stop_sequences });
    return { message: r.message as unknown as Record<string, unknown>, usage: r.usage ?? { ...zeroUsage(), input_tokens: estimateRequestTokens(o.body) } };
  },
  streamDecoder(o) {
    const parser = new SseParser();
    const enc = new TextEncoder();
    const tr = new ChatStreamTranslator({ requestedModel: o.requestedModel, id: newMessageId(), inputTokens: o.inputTokens, stopSequences: o.body.stop_sequences });
    let done = false;
    const emit = (c: TransformStreamDefaultController<Uint8Array>, evs: ReturnType<ChatStreamTranslator['start']>) => {
      if (evs.length) c.enqueue(enc.encode(evs.map(encodeAnthropicEvent).join('')));
    };
    const transform = new TransformStream<Uint8Array, Uint8Array>({
      start() {},
      transform(chunk, c) {
        for (const ev of parser.push(chunk)) {
          if (ev.data === '[DONE]') { done = true; emit(c, tr.finish()); continue; }
          let data: ChatCompletionChunk;
          try { data = JSON.parse(ev.data); } catch { continue; }
          emit(c, tr.push(data));
        }
      },
      flush(c) {
        if (done) return;
        // No [DONE]: whole if a finish_reason came (some servers omit [DONE]), else the stream was cut.
        emit(c, tr.sawFinish ? tr.finish() : tr.fail('The upstream stream ended before the message was complete'));
      },
    });
    return { transform, result: () => tr.outcome() };
  },
  classify,
  async countTokens() { return null; },
};

const adapters: Record<string, RelayAdapter> = { anthropic, openai };

/** The adapter of a channel type; unknown types fail the attempt as a gateway misconfiguration. */
export function relayAdapter(type: string): RelayAdapter {
  const a = adapters[type];
  if (!a) throw new GatewayError(500, 'unknown_channel_type', `No adapter for channel type ${type}`);
  return a;
}
