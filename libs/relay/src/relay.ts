import { GatewayError } from '@gw/core';
import { contextWindowOf, usageLimits, worstCaseCost, type BillingConfig, type PriceBook, type QuotaService, type Reservation, type TokenUsage, type UsageLimits, type UsageReport } from '@gw/billing';
import { estimateTextTokens, measureRequestTokens, type MessagesRequest, type Usage } from '@gw/formats';
import type { PriceRow } from '@gw/db';
import type { ChannelRecord } from '@gw/channels';
import { classifyTransportError, decodeContextFor, type ClassifiedError, type ProviderAdapter, type StreamDecoder, type UpstreamTarget } from '@gw/providers';
import type { RelayConfig } from './config';
import type { GateKey } from './gate';
import type { ChannelHealth } from './health';
import { orderCandidates } from './router';

/** The fields of a channel the relay reads (one source of truth: @gw/channels' ChannelRecord). */
export type RelayChannel = Pick<ChannelRecord, 'id' | 'type' | 'baseUrl' | 'apiKey' | 'models' | 'modelMapping' | 'groups'
  | 'priority' | 'weight' | 'status' | 'timeoutMs' | 'headers'>;

export interface RelayDeps {
  channels: { candidates(model: string, group: string): RelayChannel[]; all(): RelayChannel[] };
  adapter(type: string): ProviderAdapter;
  prices: PriceBook;
  quota: QuotaService;
  health: ChannelHealth;
  billing: BillingConfig;
  config: RelayConfig;
  rng?: () => number;
  /** Sees every upstream attempt's outcome (metrics); 'rate_limited' is a 429, which health ignores. */
  observeAttempt?: (channelId: number, result: 'ok' | 'error' | 'rate_limited') => void;
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

// As reported: QuotaService validates every count (one place for all paths).
const toTokens = (u: Usage): UsageReport => ({
  input: u.input_tokens, output: u.output_tokens, cacheRead: u.cache_read_input_tokens, cacheWrite: u.cache_creation_input_tokens,
});
const estimateSafe = (n: unknown) => (typeof n === 'number' && Number.isSafeInteger(n) && n >= 0 ? n : undefined);
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

  /**
   * What a request may use (input bound, or the whole context window when some input cannot be
   * measured; max_tokens of output) and its worst-case cost at the dearest prices.
   */
  worstCase(body: MessagesRequest, price: PriceRow | undefined, input: { bound: number; unmeasured: boolean }): { amount: number; limits: UsageLimits } {
    const limits = usageLimits({ tokens: input.bound, unmeasured: input.unmeasured }, body.max_tokens, contextWindowOf(price, this.d.billing.defaultContextTokens));
    return { amount: Math.max(this.d.billing.minReserve, worstCaseCost(limits, price)), limits };
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
    const measure = measureRequestTokens(body);
    const inputEstimate = measure.estimate;
    const reservation = this.d.quota.reserve({ userId: r.key.userId, apiKey: r.key, ref: r.requestId, ...this.worstCase(body, price, measure) });
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

  /**
   * Records the settlement in the journal (durable once this returns; the database write is batched
   * off the request path). A failure to record is logged and charges nothing, never thrown at the client.
   */
  private settle(res: Reservation, r: RelayRequest, ch: RelayChannel | null, usage: UsageReport | null,
    o: { status: number; errorCode: string; attempts: number; ttftMs: number | null; estimate?: Partial<TokenUsage>; estimated?: boolean }): void {
    try {
      this.d.quota.record(res, {
        requestId: r.requestId, userId: r.key.userId, apiKeyId: r.key.id, channelId: ch?.id ?? null, model: r.body.model,
        upstreamModel: ch ? ch.modelMapping[r.body.model] ?? r.body.model : '', stream: r.body.stream === true, usage,
        estimate: o.estimate, estimated: o.estimated, latencyMs: since(r.startedAt), ttftMs: o.ttftMs, status: o.status, errorCode: o.errorCode, attempts: o.attempts, ip: r.ip,
      });
    } catch (e) {
      this.d.quota.release(res);
      console.error(`[${r.requestId}] settlement could not be recorded; nothing was charged`, e);
    }
  }

  private target(ch: RelayChannel, model: string): UpstreamTarget {
    return { baseUrl: ch.baseUrl, apiKey: ch.apiKey, extraHeaders: ch.headers, upstreamModel: ch.modelMapping[model] ?? model, timeoutMs: ch.timeoutMs };
  }

  private async attempt(ch: RelayChannel, r: RelayRequest, inputEstimate: number, res: Reservation, attempts: number): Promise<Attempt> {
    const adapter = this.d.adapter(ch.type);
    const ctrl = new AbortController();
    const onClientAbort = () => ctrl.abort(new DOMException('client closed the request', 'AbortError'));
    r.signal?.addEventListener('abort', onClientAbort, { once: true });
    let timedOut = false;
    const timer = setTimeout(() => { timedOut = true; ctrl.abort(new DOMException(`no answer within ${ch.timeoutMs} ms`, 'TimeoutError')); }, ch.timeoutMs);
    const done = () => { clearTimeout(timer); r.signal?.removeEventListener('abort', onClientAbort); };
    const fail = (c: ClassifiedError, why: string): Attempt => {
      done();
      // 429 means "busy", not "broken": retry elsewhere but do not count it toward auto-disable; nor
      // does a request the upstream refused as invalid (the client's fault, not the channel's).
      // Stop hook: an attempt aborted by our side (client gone, credential revoked) says nothing about the channel.
      if (c.retryable && c.kind !== 'rate_limit' && !r.signal?.aborted) this.d.health.failure(ch.id, why);
      this.d.observeAttempt?.(ch.id, c.kind === 'rate_limit' ? 'rate_limited' : 'error');
      return { ok: false, retryable: c.retryable, error: c.error };
    };
    const transport = (cause: unknown, why: string) => fail(classifyTransportError(cause, timedOut), timedOut ? `timeout after ${ch.timeoutMs} ms` : why);
    let upstream: Response;
    try {
      const u = adapter.buildMessagesRequest(r.body, this.target(ch, r.body.model), r.headers);
      upstream = await fetch(u.url, { ...u.init, signal: ctrl.signal });
    } catch (e) {
      // A request this upstream cannot express (e.g. a server tool on a chat-completions channel) is the client's 400.
      if (e instanceof GatewayError) { done(); return { ok: false, retryable: false, error: e }; }
      return transport(e, `connect error: ${(e as Error)?.message ?? e}`);
    }
    if (!upstream.ok) {
      const text = await upstream.text().catch(() => '');
      return fail(adapter.classifyError(upstream.status, text, upstream.headers), `HTTP ${upstream.status}`);
    }
    const ctx = decodeContextFor(r.body, { inputTokens: inputEstimate });
    if (r.body.stream !== true) {
      let json: unknown;
      try {
        json = await upstream.json();
      } catch (e) {
        return transport(e, 'bad or cut response body');
      }
      done();
      let decoded;
      try {
        decoded = adapter.decodeMessagesResponse(json, ctx);
      } catch (e) {
        this.d.health.failure(ch.id, 'undecodable response');
        this.d.observeAttempt?.(ch.id, 'error');
        return { ok: false, retryable: true, error: e instanceof GatewayError ? e : new GatewayError(502, 'upstream_bad_response', 'The upstream sent an invalid response') };
      }
      this.d.health.success(ch.id);
      this.d.observeAttempt?.(ch.id, 'ok');
      // Missing or unusable counts are billed on estimates (input: what was reserved for it), never for free.
      const estimate = { output: estimateTextTokens(JSON.stringify(decoded.message.content ?? '')) };
      // Recorded before the response leaves: a completed request is never left unbilled by a crash.
      this.settle(res, r, ch, decoded.usage ? toTokens(decoded.usage) : null, { status: 200, errorCode: '', attempts, ttftMs: since(r.startedAt), estimate });
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
    } catch (e) {
      return transport(e, 'stream failed before the first byte');
    }
    if (first.done) return fail({ retryable: true, kind: 'server', error: new GatewayError(502, 'upstream_empty_stream', 'The upstream sent an empty stream') }, 'empty stream');
    done();
    this.d.health.success(ch.id);
    this.d.observeAttempt?.(ch.id, 'ok');
    const decoder = adapter.createStreamDecoder(ctx);
    return { ok: true, channel: ch, response: this.streamResponse(decoder, reader, first.value!, ch, r, res, attempts) };
  }

  private streamResponse(decoder: StreamDecoder, reader: ReadableStreamDefaultReader<Uint8Array>, first: Uint8Array, ch: RelayChannel,
    r: RelayRequest, res: Reservation, attempts: number): Response {
    const idleMs = ch.timeoutMs;
    // One idle watchdog per stream, pushed back on every chunk: an upstream silent for a whole
    // timeout_ms mid-stream counts as failed, not as slow. (A timer per chunk cost more than the chunk.)
    let rejectIdle!: (e: Error) => void;
    const idle = new Promise<never>((_, reject) => { rejectIdle = reject; });
    idle.catch(() => {});
    const watchdog = setTimeout(() => { reader.cancel().catch(() => {}); rejectIdle(new Error(`upstream silent for ${idleMs} ms`)); }, idleMs);
    const source = new ReadableStream<Uint8Array>({
      start(c) { c.enqueue(first); },
      async pull(c) {
        // Errors propagate: the decoder turns an upstream failure into an `error` event for the client.
        try {
          const { done, value } = await Promise.race([reader.read(), idle]);
          watchdog.refresh();
          if (done) {
            clearTimeout(watchdog);
            c.close();
          } else c.enqueue(value);
        } catch (e) {
          clearTimeout(watchdog);
          throw e;
        }
      },
      cancel(reason) {
        clearTimeout(watchdog);
        return reader.cancel(reason);
      },
    }, { highWaterMark: 0 });
    const decoded = decoder.pipe(source).getReader();
    let ttft: number | null = null;
    let finished = false;
    const finish = async (clientGone: boolean, reason?: unknown) => {
      if (finished) return;
      finished = true;
      const out = decoder.result();
      const usage = toTokens(out.usage ?? out.estimatedUsage);
      const estimate = { output: estimateSafe(out.estimatedUsage.output_tokens) };
      // Stop hook (inflight.ts): a stream cancelled with a GatewayError was revoked, not left by its client.
      const stopCode = reason instanceof GatewayError ? reason.code : 'client_closed';
      const errorCode = out.complete ? '' : clientGone ? stopCode : 'upstream_stream_cut';
      if (!out.complete && !clientGone) this.d.health.failure(ch.id, out.error ?? errorCode);
      this.settle(res, r, ch, usage, { status: 200, errorCode, attempts, ttftMs: ttft, estimate, estimated: !out.usage });
    };
    const body = new ReadableStream<Uint8Array>({
      async pull(c) {
        let chunk: { done: boolean; value?: Uint8Array };
        try {
          chunk = await decoded.read();
        } catch {
          chunk = { done: true };
        }
        if (chunk.done) {
          // The stream closes after its settlement was recorded.
          await finish(false);
          c.close();
          return;
        }
        if (ttft === null) ttft = since(r.startedAt);
        c.enqueue(chunk.value!);
      },
      cancel(reason) {
        void finish(true, reason);
        return decoded.cancel(reason);
      },
    }, { highWaterMark: 0 });
    return new Response(body, {
      status: 200,
      headers: { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'request-id': r.requestId },
    });
  }
}

const unknownModel = (model: string) =>
  new GatewayError(404, 'model_not_found', `Model ${model} is not served by this gateway`, { param: 'model', type: 'invalid_request_error' });

