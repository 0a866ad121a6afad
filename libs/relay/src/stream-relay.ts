/**
 * One streamed answer from the committed upstream to the client, with every way it can end:
 * - complete, or cut by the upstream (an error event; counts against the channel);
 * - the upstream silent for `idleMs` while the client waits (an error event; counts against the channel);
 * - the client gone, or `signal` aborted at any time (e.g. a revoked key): the upstream fetch is cancelled
 *   at once and the request settles for what was delivered; never the channel's fault;
 * - the client behind for `stallMs` (it takes nothing while we hold data for it): cut, `client_stalled`.
 * Backpressure: the upstream is read only when the client's side wants data; at most `bufferBytes` are
 * read ahead of the client (plus one upstream chunk and one SSE event, which the parser caps).
 * Keep-alive: while the client waits and the upstream is silent, a `ping` event goes out every
 * `keepAliveMs` (as Anthropic does), so proxies and clients with read timeouts keep the connection. Pings
 * never count as upstream activity: the upstream idle limit still applies.
 */
import { GatewayError } from '@gw/core';
import { encodeAnthropicEvent, errorFrame, type Usage } from '@gw/formats';
import type { StreamDecoder } from '@gw/providers';
import { abortError } from './fault';

export interface StreamEnd {
  /** What the upstream reported when it did (`reported`), else the estimate of what was delivered. */
  usage: Usage;
  reported: boolean;
  estimatedUsage: Usage;
  /** '' when complete; else why it ended (usage rows' errorCode). */
  errorCode: string;
  /** True only when the upstream caused the failure (health counts it). */
  upstreamFault: boolean;
  reason: string;
  ttftMs: number | null;
}

export interface StreamRelayInput {
  reader: ReadableStreamDefaultReader<Uint8Array>;
  first: Uint8Array;
  decoder: StreamDecoder;
  signal?: AbortSignal;
  idleMs: number;
  stallMs: number;
  bufferBytes: number;
  /** Ping interval during upstream silence (SSE_KEEPALIVE_MS); 0 or absent = no pings. */
  keepAliveMs?: number;
  /** performance.now() of the request's arrival (for ttft). */
  startedAt: number;
  requestId: string;
  /**
   * Called exactly once, before the client's stream closes when it closes normally. A returned promise
   * (a settlement committing) is awaited before that close.
   */
  onEnd(end: StreamEnd): void | Promise<void>;
}

/** A failure the relay itself imposed on the upstream read; its message is ours and shown to the client. */
class StreamAbortedError extends Error {
  constructor(message: string, readonly code: string, readonly upstreamFault: boolean) {
    super(message);
    this.name = 'StreamAbortedError';
  }
}

const since = (t: number) => Math.max(0, Math.round(performance.now() - t));
const encoder = new TextEncoder();
const PING = encoder.encode(encodeAnthropicEvent({ type: 'ping' }));

export function relayStream(p: StreamRelayInput): Response {
  const { reader, decoder, signal } = p;
  let stopped: StreamAbortedError | null = null;
  // Cancelling the reader also ends a read in progress (it resolves as done). No Promise.race against a
  // long-lived promise here: every race leaves a reaction on it that keeps that chunk alive until it
  // settles, which held whole streams in memory.
  const halt = (e: StreamAbortedError) => {
    if (stopped) return;
    stopped = e;
    reader.cancel(e).catch(() => {});
  };

  // One timer per stream, pushed back instead of re-created (a timer per chunk cost more than the chunk).
  // It only counts while we wait for the upstream: a slow client must not look like a silent upstream.
  let waitingUpstream = false;
  const idle = setTimeout(() => {
    if (waitingUpstream) halt(new StreamAbortedError(`The upstream sent nothing for ${p.idleMs} ms.`, 'upstream_stream_cut', true));
  }, p.idleMs);

  const source = new ReadableStream<Uint8Array>({
    start(c) { c.enqueue(p.first); },
    async pull(c) {
      // Errors propagate: the decoder turns them into the client's `error` event.
      waitingUpstream = true;
      idle.refresh();
      try {
        const { done, value } = await reader.read();
        if (stopped) throw stopped;
        if (done) c.close();
        else c.enqueue(value);
      } finally {
        waitingUpstream = false;
      }
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  }, { highWaterMark: 0 });
  const decoded = decoder.pipe(source).getReader();

  let ttft: number | null = null;
  let ended = false;
  const end = (clientSide: { code: string } | null): void | Promise<void> => {
    if (ended) return;
    ended = true;
    clearTimeout(idle);
    clearTimeout(stall);
    clearTimeout(keepAlive);
    signal?.removeEventListener('abort', onAbort);
    const out = decoder.result();
    const usage = out.usage ?? out.estimatedUsage;
    let errorCode = '';
    let upstreamFault = false;
    if (clientSide) errorCode = clientSide.code;
    else if (stopped) ({ code: errorCode, upstreamFault } = stopped);
    else if (!out.complete) { errorCode = 'upstream_stream_cut'; upstreamFault = true; }
    return p.onEnd({ usage, reported: out.usage != null, estimatedUsage: out.estimatedUsage, errorCode, upstreamFault, reason: out.error ?? errorCode, ttftMs: ttft });
  };

  let ctrl: ReadableStreamDefaultController<Uint8Array> | null = null;
  let closed = false;
  const closeWith = (frame: string | null, tearDown: boolean) => {
    if (closed || !ctrl) return;
    closed = true;
    try {
      if (tearDown) ctrl.error(new Error('stream cut by the gateway'));
      else {
        if (frame) ctrl.enqueue(encoder.encode(frame));
        ctrl.close();
      }
    } catch { /* already closing */ }
    decoded.cancel().catch(() => {});
  };

  // Pushed back by every chunk sent; fires only after keepAliveMs without output. A ping is sent only
  // while the client has taken everything (its read is pending) and we are waiting on the upstream.
  const keepAlive = setTimeout(function ping() {
    if (ended || closed || !ctrl) return;
    if (waitingUpstream && !waitingClient) {
      try { ctrl.enqueue(PING); } catch { return; }
    }
    keepAlive.refresh();
  }, p.keepAliveMs || 2 ** 31 - 1);
  if (!p.keepAliveMs) clearTimeout(keepAlive);

  // The client is behind while we hold data it has not taken; past stallMs it is cut.
  let waitingClient = false;
  const stall = setTimeout(() => {
    if (!waitingClient || ended) return;
    halt(new StreamAbortedError('The client stopped reading.', 'client_stalled', false));
    end({ code: 'client_stalled' });
    closeWith(null, true);
  }, p.stallMs);

  function onAbort() {
    if (ended) return;
    const err = abortError(signal);
    halt(new StreamAbortedError(err.message, err.code, false));
    end({ code: err.code });
    // A reason of ours (a revoked key) is told to a client still reading; a gone client hears nothing.
    closeWith(signal?.reason instanceof GatewayError ? errorFrame(err.message, err.type) : null, false);
  }
  signal?.addEventListener('abort', onAbort, { once: true });

  const body = new ReadableStream<Uint8Array>({
    start(c) { ctrl = c; },
    async pull(c) {
      waitingClient = false;
      let chunk: { done: boolean; value?: Uint8Array };
      try {
        chunk = await decoded.read();
      } catch {
        chunk = { done: true, value: undefined };
      }
      if (closed) return;
      if (chunk.done) {
        const settling = end(null); // the settlement is recorded before the client sees the end
        closed = true;
        if (settling) await settling.catch(() => {});
        c.close();
        return;
      }
      if (ttft === null) ttft = since(p.startedAt);
      c.enqueue(chunk.value!);
      waitingClient = true;
      stall.refresh();
      if (p.keepAliveMs) keepAlive.refresh();
    },
    cancel() {
      end({ code: 'client_closed' });
      closed = true;
      halt(new StreamAbortedError('The client closed the request.', 'client_closed', false));
      return decoded.cancel().catch(() => {});
    },
  }, { highWaterMark: p.bufferBytes, size: (chunk) => chunk?.byteLength ?? 0 });
  if (signal?.aborted) onAbort();

  return new Response(body, {
    status: 200,
    headers: { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'request-id': p.requestId },
  });
}
