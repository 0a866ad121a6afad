import { GatewayError } from '@gw/core';
import { costFor, type BillingConfig, type PriceBook, type QuotaService, type Reservation, type TokenUsage } from '@gw/billing';
import { errorFrame, estimateRequestTokens, type MessagesRequest, type Usage } from '@gw/formats';
import type { PriceRow } from '@gw/db';
import type { RelayAdapter, UpstreamTarget } from './adapter';
import type { RelayConfig } from './config';
import type { GateKey } from './gate';
import type { ChannelHealth } from './health';
import { orderCandidates } from './router';

/** A channel as the relay uses it (structurally @gw/channels' ChannelRecord). */
export interface RelayChannel {
  id: number;
  type: string;
  baseUrl: string;
  apiKey: string;
  models: string[];
  modelMapping: Record<string, string>;
  groups: string[];
  priority: number;
  weight: number;
  status: number;
  timeoutMs: number;
  headers: Record<string, string>;
}

export interface RelayDeps {
  channels: { candidates(model: string, group: string): RelayChannel[]; all(): RelayChannel[] };
  adapter(type: string): RelayAdapter;
  prices: PriceBook;
  quota: QuotaService;
  health: ChannelHealth;
  billing: BillingConfig;
  config: RelayConfig;
  rng?: () => number;
}

/** One authorized /v1/messages request. */
export interface RelayRequest {
  requestId: string;
  body: MessagesRequest;
  headers: Headers;
  key: GateKey;
  group: string;
  ip: string;
  /** performance.now() when the request arrived. */
  startedAt: number;
  /** Aborted when the client goes away. */
  signal?: AbortSignal;
}

type Attempt =
  | { ok: true; response: Response; channel: RelayChannel }
  | { ok: false; retryable: boolean; error: GatewayError };

const toTokens = (u: Usage): TokenUsage => ({
  input: u.input_tokens ?? 0, output: u.output_tokens ?? 0,
  cacheRead: u.cache_read_input_tokens ?? 0, cacheWrite: u.cache_creation_input_tokens ?? 0,
});
const ZERO: TokenUsage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 };
const since = (t: number) => Math.max(0, Math.round(performance.now() - t));

/**
 * POST /v1/messages after the gate: price and quota (402), routing (404/503), attempts with failover,
 * and settlement. Retries happen only before the first byte reached the client, never on a channel that
 * already failed in this request, at most `maxAttempts` channels.
 */
export class RelayService {
  constructor(private readonly d: RelayDeps) {}

  /** The price of `model`, or the reason it cannot be served (404 unknown model, 403 not priced). */
  priceFor(model: string, group: string): PriceRow | undefined {
    const p = this.d.prices.get(model);
    if (p || !this.d.billing.requirePrice) return p;
    if (!this.d.channels.all().some((c) => c.models.includes(model) && c.groups.includes(group))) throw unknownModel(model);
    throw new GatewayError(403, 'model_not_priced', `Model ${model} has no price configured; an administrator must set one before it can be used`, { param: 'model' });
  }

  /** Worst case of a request: estimated input at the dearest input price + max_tokens of output. */
  worstCase(body: MessagesRequest, price: PriceRow | undefined, inputEstimate: number): number {
    const dearIn = price ? Math.max(price.input, price.cacheWrite, price.cacheRead) : 0;
    const cost = costFor({ input: inputEstimate, output: body.max_tokens, cacheRead: 0, cacheWrite: 0 }, price && { ...price, input: dearIn });
    return Math.max(this.d.billing.minReserve, cost);
  }

  /** Channels to try, best first; throws 404 (nobody serves it) or 503 (all unhealthy). */
  route(model: string, group: string): RelayChannel[] {
    const candidates = this.d.channels.candidates(model, group);
    if (candidates.length) return orderCandidates(candidates, this.d.rng).slice(0, this.d.config.maxAttempts);
    if (this.d.channels.all().some((c) => c.models.includes(model) && c.groups.includes(group))) {
      throw new GatewayError(503, 'no_healthy_channel', `No healthy channel is available for model ${model}; try again later`);
    }
    throw unknownModel(model);
  }

  async messages(r: RelayRequest): Promise<Response> {
    const { body } = r;
    const price = this.priceFor(body.model, r.group);
    const inputEstimate = estimateRequestTokens(body);
    const reservation = this.d.quota.reserve({ userId: r.key.userId, apiKey: r.key, amount: this.worstCase(body, price, inputEstimate), ref: r.requestId });
    let attempts = 0;
    let lastChannel: RelayChannel | null = null;
    try {
      const order = this.route(body.model, r.group);
      let last: GatewayError | null = null;
      for (const channel of order) {
        attempts++;
        lastChannel = channel;
        const a = await this.attempt(channel, r, inputEstimate, reservation, attempts);
        if (a.ok) return a.response;
        last = a.error;
        if (!a.retryable || r.signal?.aborted) break;
      }
      throw last ?? new GatewayError(503, 'no_healthy_channel', 'No channel could serve the request');
    } catch (e) {
      const err = e instanceof GatewayError ? e : new GatewayError(502, 'upstream_error', 'Upstream request failed', { cause: e });
      // Nothing reached the client: no charge, but the attempt is logged.
      this.settle(reservation, r, lastChannel, ZERO, { status: err.status, errorCode: err.code, attempts, ttftMs: null });
      throw err;
    }
  }

  private settle(res: Reservation, r: RelayRequest, ch: RelayChannel | null, usage: TokenUsage,
    o: { status: number; errorCode: string; attempts: number; ttftMs: number | null }): void {
    try {
      this.d.quota.settle(res, {
        requestId: r.requestId, userId: r.key.userId, apiKeyId: r.key.id, channelId: ch?.id ?? null, model: r.body.model,
        upstreamModel: ch ? ch.modelMapping[r.body.model] ?? r.body.model : '', stream: r.body.stream === true, usage,
        latencyMs: since(r.startedAt), ttftMs: o.ttftMs, status: o.status, errorCode: o.errorCode, attempts: o.attempts, ip: r.ip,
      });
    } catch (e) {
      // The transaction rolled back: nothing was charged. Keep serving; the operator sees the log line.
      console.error(`[${r.requestId}] settle failed`, e);
    }
  }

  private target(ch: RelayChannel, model: string): UpstreamTarget {
    return { baseUrl: ch.baseUrl, apiKey: ch.apiKey, headers: ch.headers, upstreamModel: ch.modelMapping[model] ?? model };
  }

  private async attempt(ch: RelayChannel, r: RelayRequest, inputEstimate: number, res: Reservation, attempts: number): Promise<Attempt> {
    const adapter = this.d.adapter(ch.type);
    const stream = r.body.stream === true;
    const ctrl = new AbortController();
    const onClientAbort = () => ctrl.abort(new DOMException('client closed the request', 'AbortError'));
    r.signal?.addEventListener('abort', onClientAbort, { once: true });
    let timedOut = false;
    const timer = setTimeout(() => { timedOut = true; ctrl.abort(new DOMException(`no answer within ${ch.timeoutMs} ms`, 'TimeoutError')); }, ch.timeoutMs);
    const fail = (input: Parameters<RelayAdapter['classify']>[0], why: string): Attempt => {
      clearTimeout(timer);
      r.signal?.removeEventListener('abort', onClientAbort);
      const c = adapter.classify(timedOut ? { error: new DOMException(`timeout after ${ch.timeoutMs} ms`, 'TimeoutError') } : input);
      // 429 means "busy", not "broken": retry elsewhere but do not count it toward auto-disable.
      if (c.retryable && input.status !== 429) this.d.health.failure(ch.id, why);
      return { ok: false, retryable: c.retryable, error: c.error };
    };
    let req: Request;
    try {
      req = adapter.buildRequest(this.target(ch, r.body.model), r.body, { stream, clientHeaders: r.headers });
    } catch (e) {
      // The request cannot be expressed for this upstream (e.g. a server tool on a chat-completions channel).
      clearTimeout(timer);
      r.signal?.removeEventListener('abort', onClientAbort);
      return { ok: false, retryable: false, error: e instanceof GatewayError ? e : new GatewayError(400, 'untranslatable_request', String((e as Error)?.message ?? e)) };
    }
    let upstream: Response;
    try {
      upstream = await fetch(req, { signal: ctrl.signal });
    } catch (error) {
      return fail({ error }, timedOut ? 'timeout' : `connect error: ${(error as Error)?.message ?? error}`);
    }
    if (!upstream.ok) {
      const text = await upstream.text().catch(() => '');
      return fail({ status: upstream.status, body: text, headers: upstream.headers }, `HTTP ${upstream.status}`);
    }
    if (!stream) {
      let json: unknown;
      try {
        json = await upstream.json();
      } catch (error) {
        return fail({ error }, timedOut ? 'timeout' : 'bad or cut response body');
      }
      clearTimeout(timer);
      r.signal?.removeEventListener('abort', onClientAbort);
      this.d.health.success(ch.id);
      const decoded = adapter.decodeResponse(json, { requestedModel: r.body.model, body: r.body });
      // Billed before the response leaves: a completed request is never left unbilled by a crash.
      this.settle(res, r, ch, toTokens(decoded.usage), { status: 200, errorCode: '', attempts, ttftMs: since(r.startedAt) });
      return {
        ok: true, channel: ch,
        response: new Response(JSON.stringify(decoded.message), { status: 200, headers: { 'content-type': 'application/json', 'request-id': r.requestId } }),
      };
    }
    // Streaming: wait for the first upstream chunk before committing to this channel, so a channel that
    // accepts and then dies before sending anything is still retried elsewhere.
    const reader = upstream.body!.getReader() as ReadableStreamDefaultReader<Uint8Array>;
    let first: { done: boolean; value?: Uint8Array };
    try {
      first = await reader.read();
    } catch (error) {
      return fail({ error }, timedOut ? 'timeout' : 'stream failed before the first byte');
    }
    if (first.done) return fail({ status: 502, body: '' }, 'empty stream');
    clearTimeout(timer);
    this.d.health.success(ch.id);
    return { ok: true, channel: ch, response: this.streamResponse(adapter, reader, first.value!, ch, r, res, inputEstimate, attempts, () => r.signal?.removeEventListener('abort', onClientAbort)) };
  }

  private streamResponse(adapter: RelayAdapter, reader: ReadableStreamDefaultReader<Uint8Array>, first: Uint8Array, ch: RelayChannel,
    r: RelayRequest, res: Reservation, inputEstimate: number, attempts: number, cleanup: () => void): Response {
    let cut = false;
    const source = new ReadableStream<Uint8Array>({
      start(c) { c.enqueue(first); },
      async pull(c) {
        try {
          const { done, value } = await reader.read();
          if (done) c.close();
          else c.enqueue(value);
        } catch {
          // The upstream died mid-stream: end the source so the decoder can close what it has.
          cut = true;
          c.close();
        }
      },
      cancel(reason) { return reader.cancel(reason); },
    }, { highWaterMark: 0 });
    const decoder = adapter.streamDecoder({ requestedModel: r.body.model, body: r.body, inputTokens: inputEstimate });
    const decoded = source.pipeThrough(decoder.transform).getReader();
    let ttft: number | null = null;
    let finished = false;
    const finish = (clientGone: boolean) => {
      if (finished) return;
      finished = true;
      cleanup();
      const out = decoder.result();
      const usage = toTokens(out.usage ?? out.estimatedUsage);
      const errorCode = clientGone ? 'client_closed' : out.complete ? '' : cut ? 'upstream_stream_cut' : 'upstream_stream_incomplete';
      if (!out.complete && !clientGone) this.d.health.failure(ch.id, errorCode);
      this.settle(res, r, ch, usage, { status: 200, errorCode, attempts, ttftMs: ttft });
    };
    const encoder = new TextEncoder();
    const body = new ReadableStream<Uint8Array>({
      async pull(c) {
        let chunk: { done: boolean; value?: Uint8Array };
        try {
          chunk = await decoded.read();
        } catch {
          chunk = { done: true, value: undefined };
          cut = true;
        }
        if (!chunk.done) {
          if (ttft === null) ttft = since(r.startedAt);
          c.enqueue(chunk.value!);
          return;
        }
        const out = decoder.result();
        // After the first byte an error can only be an event (API.md): say so before closing.
        if (!out.complete && !out.failed) c.enqueue(encoder.encode(errorFrame('The upstream stream ended before the message was complete', 'api_error')));
        finish(false);
        c.close();
      },
      cancel(reason) {
        finish(true);
        return decoded.cancel(reason);
      },
    }, { highWaterMark: 0 });
    return new Response(body, {
      status: 200,
      headers: { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive', 'request-id': r.requestId },
    });
  }
}

const unknownModel = (model: string) =>
  new GatewayError(404, 'model_not_found', `Model ${model} is not served by this gateway`, { param: 'model', type: 'invalid_request_error' });

