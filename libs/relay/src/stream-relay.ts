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
 *
 * Cost per stream is the point of the shape: one pull-based stream drives the decoder's synchronous
 * transcoder (no stream per stage), coalesces what is queued into one write per pull, and one timer checks
 * every deadline by timestamps. An upstream that already sent its whole answer when the first chunk is
 * read (a short reply) is answered as one body with no stream at all: Bun then writes it in one syscall,
 * where a stream that closes right after it starts costs it a write per header line.
 */
import { concatBytes, GatewayError } from '@gw/core';
import { encodeAnthropicEvent, errorFrame, type Usage } from '@gw/formats';
import type { StreamDecoder } from '@gw/providers';
import { abortError } from './fault';
import { turnOver } from './turn';

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
  /** Called exactly once, before the client's stream closes when it closes normally. */
  onEnd(end: StreamEnd): void;
}

/** A failure the relay itself imposed on the upstream read; its message is ours and shown to the client. */
class StreamAbortedError extends Error {
  constructor(message: string, readonly code: string, readonly upstreamFault: boolean) {
    super(message);
    this.name = 'StreamAbortedError';
  }
}

type ReadResult = { done: false; value: Uint8Array } | { done: true; value?: undefined };
type ReadOutcome = ReadResult | { error: unknown };

const since = (t: number) => Math.max(0, Math.round(performance.now() - t));
const encoder = new TextEncoder();
const PING = encoder.encode(encodeAnthropicEvent({ type: 'ping' }));
const NOT_YET = Symbol('not yet');
/** Microtasks a read of an already-received body takes to resolve (measured: 2); a live upstream takes longer. */
const READY_TICKS = 4;
const NEVER = 2 ** 31 - 1;

/** The read's outcome if it settles within a few microtasks (data Bun already holds), else NOT_YET. */
async function settledSoon(read: Promise<ReadResult>): Promise<ReadOutcome | typeof NOT_YET> {
  let out: ReadOutcome | typeof NOT_YET = NOT_YET;
  read.then((r) => { out = r; }, (error) => { out = { error }; });
  for (let i = 0; i < READY_TICKS && out === NOT_YET; i++) await null;
  return out;
}

const headersFor = (requestId: string) => ({ 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'request-id': requestId });

export async function relayStream(p: StreamRelayInput): Promise<Response> {
  // Closures below read these locals, never `p`: what a held stream keeps is what they name (not the first chunk).
  const { reader, signal, decoder, idleMs, stallMs, bufferBytes, startedAt, onEnd } = p;
  const t = decoder.transcoder;
  let stopped: StreamAbortedError | null = null;
  // Cancelling the reader also ends a read in progress (it resolves as done). No Promise.race against a
  // long-lived promise here: every race leaves a reaction on it that keeps that chunk alive until it
  // settles, which held whole streams in memory.
  const halt = (e: StreamAbortedError) => {
    if (stopped) return;
    stopped = e;
    reader.cancel(e).catch(() => {});
  };

  // Client bytes produced and not yet handed to the client.
  let parts: Uint8Array[] = [];
  let queued = 0;
  /** No more upstream input will come: what is queued is the rest of the client stream. */
  let finished = false;
  const absorb = (r: ReadOutcome) => {
    let out: Uint8Array | null;
    if ('error' in r) out = t.fail(r.error);
    else if (stopped) out = t.fail(stopped);
    else if (r.done) out = t.end();
    else {
      out = t.push(r.value);
      if (t.stopped) reader.cancel().catch(() => {});
    }
    if (out) {
      parts.push(out);
      queued += out.byteLength;
    }
    finished = t.stopped;
  };

  let ttft: number | null = null;
  let ended = false;
  const end = (clientSide: { code: string } | null) => {
    if (ended) return;
    ended = true;
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
    const out = decoder.result();
    const usage = out.usage ?? out.estimatedUsage;
    let errorCode = '';
    let upstreamFault = false;
    if (clientSide) errorCode = clientSide.code;
    else if (stopped) ({ code: errorCode, upstreamFault } = stopped);
    else if (!out.complete) { errorCode = 'upstream_stream_cut'; upstreamFault = true; }
    onEnd({ usage, reported: out.usage != null, estimatedUsage: out.estimatedUsage, errorCode, upstreamFault, reason: out.error ?? errorCode, ttftMs: ttft });
  };

  absorb({ done: false, value: p.first });
  // Whatever the upstream already sent is taken now, up to the read-ahead cap.
  let pending: Promise<ReadResult> | null = null;
  while (!finished && queued <= bufferBytes && !signal?.aborted && !turnOver()) {
    const read = reader.read();
    const r = await settledSoon(read);
    if (r === NOT_YET) {
      pending = read;
      break;
    }
    absorb(r);
  }
  let timer: ReturnType<typeof setTimeout> | undefined;
  if (finished && !signal?.aborted) {
    ttft = since(startedAt);
    end(null); // the settlement is recorded before the client sees the answer
    return new Response(concatBytes(parts), { status: 200, headers: headersFor(p.requestId) });
  }

  let ctrl: ReadableStreamDefaultController<Uint8Array> | null = null;
  let closed = false;
  /** Resolves the pull that waits for client bytes. */
  let wake: (() => void) | null = null;
  const notify = () => {
    const w = wake;
    wake = null;
    w?.();
  };
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
    notify();
  };

  // Deadlines are timestamps checked by one timer per stream (pushing three timers back on every chunk cost
  // more than the chunk). `upstreamSince`: the read we wait on began (the idle limit counts only while the
  // client waits for us: a slow client must not look like a silent upstream). `clientSince`: bytes the
  // client has not taken were handed over. `quietSince`: the last bytes went out (keep-alive pings).
  let waitingUpstream = false;
  let waitingClient = false;
  let upstreamSince = 0;
  let clientSince = 0;
  let quietSince = performance.now();
  const keepAliveMs = p.keepAliveMs || NEVER;
  const check = () => {
    if (ended || closed) return;
    const now = performance.now();
    if (waitingClient && now - clientSince >= stallMs) {
      halt(new StreamAbortedError('The client stopped reading.', 'client_stalled', false));
      end({ code: 'client_stalled' });
      return closeWith(null, true);
    }
    if (waitingUpstream && now - upstreamSince >= idleMs) {
      halt(new StreamAbortedError(`The upstream sent nothing for ${idleMs} ms.`, 'upstream_stream_cut', true));
      return;
    }
    // A ping only while the client has taken everything (its read is pending) and we wait on the upstream.
    if (waitingUpstream && !waitingClient && now - quietSince >= keepAliveMs && ctrl) {
      try { ctrl.enqueue(PING); } catch { return; }
      quietSince = now;
    }
    // Next check at the earliest deadline that could fall due (a state that starts later starts its own full period).
    const next = Math.min(
      waitingClient ? clientSince + stallMs - now : stallMs,
      waitingUpstream ? upstreamSince + idleMs - now : idleMs,
      quietSince + keepAliveMs - now,
    );
    timer = setTimeout(check, Math.max(1, Math.min(NEVER, Math.ceil(next))));
  };
  timer = setTimeout(check, Math.min(stallMs, idleMs, keepAliveMs));

  /** Reads ahead of the client while fewer than bufferBytes wait for it (at least until one chunk does). */
  let pumping = false;
  const pump = async () => {
    if (pumping) return;
    pumping = true;
    try {
      while (!finished && !closed && (queued === 0 || queued < bufferBytes)) {
        const wait = pending ? null : turnOver();
        if (wait) {
          await wait;
          if (closed || finished) return;
        }
        const read = pending ?? reader.read();
        pending = null;
        waitingUpstream = true;
        upstreamSince = performance.now();
        let r: ReadOutcome;
        try {
          r = await read;
        } catch (error) {
          r = { error };
        }
        waitingUpstream = false;
        if (closed) return;
        absorb(r);
        if (queued) notify();
      }
    } finally {
      pumping = false;
      notify();
    }
  };

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
      while (!queued && !finished && !closed) {
        const woken = new Promise<void>((r) => { wake = r; });
        void pump();
        await woken;
      }
      if (closed) return;
      if (queued) {
        if (ttft === null) ttft = since(startedAt);
        const out = concatBytes(parts)!;
        parts = [];
        queued = 0;
        c.enqueue(out);
        waitingClient = true;
        clientSince = quietSince = performance.now();
      }
      if (finished) {
        end(null); // the settlement is recorded before the client sees the end
        closed = true;
        c.close();
        return;
      }
      void pump(); // read ahead while the client takes this
    },
    cancel() {
      end({ code: 'client_closed' });
      closed = true;
      halt(new StreamAbortedError('The client closed the request.', 'client_closed', false));
      notify();
    },
  }, { highWaterMark: 0 });
  if (signal?.aborted) onAbort();

  return new Response(body, { status: 200, headers: headersFor(p.requestId) });
}
