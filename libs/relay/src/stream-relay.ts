/**
 * One streamed answer from the committed upstream to the client, with every way it can end:
 * - complete, or cut by the upstream (an error event; counts against the channel);
 * - the upstream silent for `idleMs` while the client waits (an error event; counts against the channel);
 * - the client gone, or `signal` aborted at any time (e.g. a revoked key): the upstream fetch is cancelled
 *   at once and the request settles for what was delivered; never the channel's fault. Except a client gone
 *   after the upstream finished generating (finish_reason seen) but before its usage report: the upstream is
 *   read on, output dropped, for at most `DRAIN_MS` and `DRAIN_BYTES`, and the request settles on the usage
 *   if it came (else as above): leaving just before OpenAI's usage chunk would bill the input at the estimate;
 * - the client behind for `stallMs` (it takes nothing while we hold data for it): cut, `client_stalled`;
 * - the answer whole (message_stop; or finish and usage) but the upstream not closing: `TAIL_GRACE_MS` after
 *   the answer became whole (whatever the upstream still sends), the relay closes it itself and the stream
 *   ends normally (waiting for `idleMs` would hold the client's end and then fail an answer that was
 *   complete; pings would never let it fall due).
 * Backpressure: the upstream is read only when the client's side wants data; at most `bufferBytes` are
 * read ahead of the client (plus one upstream chunk and one SSE event, which the parser caps).
 * Keep-alive: while the client waits and the upstream is silent, a `ping` event goes out every
 * `keepAliveMs` (as Anthropic does), so proxies and clients with read timeouts keep the connection. Pings
 * never count as upstream activity: the upstream idle limit still applies.
 *
 * Cost per stream is the point of the shape: one pull-based stream drives the decoder's synchronous
 * transcoder (no stream per stage), coalesces what is queued into one write per pull, and one timer checks
 * every deadline by timestamps. A held stream is one StreamRelay object (it is the client stream's source,
 * the abort listener and the timer's argument) with two read callbacks: no suspended async function, no
 * closure per deadline or per wait, and nothing of the request it came from but what `onEnd` holds. An upstream that already sent its whole answer when the first chunk is
 * read (a short reply) is answered as one body with no stream at all: Bun then writes it in one syscall,
 * where a stream that closes right after it starts costs it a write per header line. Where the settlement
 * commits asynchronously (PostgreSQL), every end of a stream holds back its last byte until the commit
 * (held-tail.ts): the client sees all but the end at once, and the end only once the charge is durable.
 */
import { coalesceBytes, concatBytes, GatewayError } from '@gw/core';
import { encodeAnthropicEvent, errorFrame, type Usage } from '@gw/formats';
import type { ReportedPeak, StreamDecoder } from '@gw/providers';
import { abortError } from './fault';
import { turnOver } from './turn';
import { endAfter, heldTail, holdLastByte } from './held-tail';
import type { DecodedBound } from './stream-encoding';

export interface StreamEnd {
  /** What the upstream reported when it did (`reported`), else the estimate of what was delivered. */
  usage: Usage;
  reported: boolean;
  estimatedUsage: Usage;
  /** Code-execution calls delivered (counted by the decoder; absent = none). */
  codeExecutionCalls?: number;
  /** The highest usable input and cache counts reported (see StreamResult.peak); absent = none known. */
  peak?: ReportedPeak;
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
  /** A read of `reader` already in progress (started while the stream's start was judged): taken over before any other. */
  pending?: Promise<ReadResult> | null;
  decoder: StreamDecoder;
  signal?: AbortSignal;
  idleMs: number;
  stallMs: number;
  /** The stream's whole life from `startedAt` (STREAM_MAX_DURATION_MS); 0 or absent = none. */
  maxMs?: number;
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
  /**
   * The settlement commits after the stream ends (PostgreSQL): the last byte of the message's last event
   * is held back until then, so the client cannot see a complete answer that is not billed yet.
   */
  holdEnd?: boolean;
  /**
   * Every `checkpointMs` of a stream's life (first after `checkpointMs`; 0 or absent = never), what it would be
   * billed were it cut now, for the process's death: `onEnd`'s argument as if the gateway had cut it. By the
   * stream's timer, so a stream shorter than `checkpointMs` costs nothing, and never per chunk.
   */
  checkpointMs?: number;
  onCheckpoint?(end: StreamEnd): void;
  /**
   * The upstream compressed its stream (against the request's accept-encoding): its decoded bytes are bounded, and
   * past a bound the stream ends as the upstream's bad response (stream-encoding.ts). Absent: not compressed.
   */
  decodedBound?: DecodedBound;
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
/** How long a whole answer's upstream may take to close (a real one closes at once). */
const TAIL_GRACE_MS = 1000;
/**
 * After the client left a finished answer: how long (at most the idle limit) and how many more upstream bytes
 * the relay reads for the usage report (OpenAI sends it in the chunk after finish_reason, a few hundred bytes).
 */
const DRAIN_MS = 3000;
const DRAIN_BYTES = 16 << 10;

/** The read's outcome if it settles within a few microtasks (data Bun already holds), else NOT_YET. */
async function settledSoon(read: Promise<ReadResult>): Promise<ReadOutcome | typeof NOT_YET> {
  let out: ReadOutcome | typeof NOT_YET = NOT_YET;
  read.then((r) => { out = r; }, (error) => { out = { error }; });
  for (let i = 0; i < READY_TICKS && out === NOT_YET; i++) await null;
  return out;
}

const headersFor = (requestId: string) => ({ 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'request-id': requestId });

export async function relayStream(p: StreamRelayInput): Promise<Response> {
  const s = new StreamRelay(p);
  s.absorb({ done: false, value: p.first });
  s.pending = p.pending ?? null;
  // Whatever the upstream already sent is taken now, up to the read-ahead cap.
  while (!s.finished && s.queued <= s.bufferBytes && !p.signal?.aborted && !turnOver()) {
    const read = s.pending ?? p.reader.read();
    s.pending = null;
    const r = await settledSoon(read);
    if (r === NOT_YET) {
      s.pending = read;
      break;
    }
    s.absorb(r);
  }
  if (s.finished && !p.signal?.aborted) {
    s.ttft = since(p.startedAt);
    const settling = s.end(null);
    const body = concatBytes(s.parts);
    // Journaled (SQLite): one body. Committing (PostgreSQL): all but the last byte now, that byte after the commit.
    return new Response(settling ? heldTail(body, settling) : body, { status: 200, headers: headersFor(p.requestId) });
  }
  return new Response(s.open(), { status: 200, headers: headersFor(p.requestId) });
}

type Controller = ReadableStreamDefaultController<Uint8Array>;
const checkDeadlines = (s: StreamRelay) => s.check();

/** One relayed stream's state; also the client stream's underlying source and the abort listener. */
class StreamRelay {
  readonly reader: ReadableStreamDefaultReader<Uint8Array>;
  readonly signal: AbortSignal | undefined;
  readonly decoder: StreamDecoder;
  readonly bufferBytes: number;
  private readonly decodedBound: DecodedBound | undefined;
  private readonly idleMs: number;
  /** The upstream's time to close once the answer is whole. */
  private readonly tailMs: number;
  /** performance.now() when the answer became whole (-1: not yet); the close's grace counts from here. */
  private wholeAt = -1;
  /** The relay closed the upstream of a whole answer itself. */
  private tailCut = false;
  private readonly stallMs: number;
  private readonly maxMs: number;
  private readonly keepAliveMs: number;
  private readonly startedAt: number;
  private readonly onEnd: (end: StreamEnd) => void | Promise<void>;
  private readonly holdEnd: boolean;
  private readonly checkpointMs: number;
  private readonly onCheckpoint: ((end: StreamEnd) => void) | undefined;
  /** performance.now() of the next checkpoint (Infinity: none). */
  private checkpointAt = Infinity;
  /** Client bytes produced so far, and as of the last checkpoint: a stream that produced nothing since keeps it. */
  private produced = 0;
  private producedAtCheckpoint = 0;
  /** The last byte of the message's last event, held back until the settlement commits (holdEnd). */
  private held: Uint8Array | null = null;
  private stopped: StreamAbortedError | null = null;
  /** Client bytes produced and not yet handed to the client. */
  parts: Uint8Array[] = [];
  queued = 0;
  /** No more upstream input will come: what is queued is the rest of the client stream. */
  finished = false;
  ttft: number | null = null;
  private ended = false;
  /** A read begun before the stream opened and not settled yet. */
  pending: Promise<ReadResult> | null = null;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private ctrl: Controller | null = null;
  private closed = false;
  /**
   * Stopped by the signal (a revoked key) while its settlement commits: nothing more is read or handed
   * over, and the client's stream closes (with the error event) once the commit is through, as a normal
   * end waits for it. Resolves when the stream is closed.
   */
  private draining: Promise<void> | null = null;
  /** The client left a finished answer and the upstream is read on for its usage (see drain()): bytes still allowed, -1 = not draining. */
  private drainLeft = -1;
  /** Resolves the pull that waits for client bytes. */
  private wake: (() => void) | null = null;
  private pumping = false;
  // Deadlines are timestamps checked by one timer per stream (pushing three timers back on every chunk cost
  // more than the chunk). `upstreamSince`: the read we wait on began (the idle limit counts only while the
  // client waits for us: a slow client must not look like a silent upstream). `clientSince`: bytes the
  // client has not taken were handed over. `quietSince`: the last bytes went out (keep-alive pings).
  private waitingUpstream = false;
  private waitingClient = false;
  private upstreamSince = 0;
  private clientSince = 0;
  private quietSince = 0;
  private readonly onRead: (r: ReadResult) => void;
  private readonly onReadError: (error: unknown) => void;

  constructor(p: StreamRelayInput) {
    this.reader = p.reader;
    this.signal = p.signal;
    this.decoder = p.decoder;
    this.bufferBytes = p.bufferBytes;
    this.decodedBound = p.decodedBound;
    this.idleMs = p.idleMs;
    this.tailMs = Math.min(TAIL_GRACE_MS, p.idleMs);
    this.stallMs = p.stallMs;
    this.maxMs = p.maxMs || NEVER;
    this.keepAliveMs = p.keepAliveMs || NEVER;
    this.startedAt = p.startedAt;
    this.onEnd = p.onEnd;
    this.holdEnd = p.holdEnd === true;
    this.onCheckpoint = p.onCheckpoint;
    this.checkpointMs = p.onCheckpoint && p.checkpointMs ? p.checkpointMs : 0;
    this.onRead = (r) => this.read(r);
    this.onReadError = (error) => this.read({ error });
  }

  // Cancelling the reader also ends a read in progress (it resolves as done). No Promise.race against a
  // long-lived promise here: every race leaves a reaction on it that keeps that chunk alive until it
  // settles, which held whole streams in memory.
  private halt(e: StreamAbortedError): void {
    if (this.stopped) return;
    this.stopped = e;
    this.reader.cancel(e).catch(() => {});
  }

  absorb(r: ReadOutcome): void {
    const t = this.decoder.transcoder;
    let out: Uint8Array[];
    if ('error' in r) out = t.fail(r.error);
    else if (this.stopped) out = t.fail(this.stopped);
    else if (r.done) out = t.end();
    else if (this.decodedBound) out = this.pushBounded(t, r.value, this.decodedBound);
    else {
      out = t.push(r.value);
      if (t.stopped) this.reader.cancel().catch(() => {});
      else if (this.wholeAt < 0 && t.answerWhole) this.becameWhole();
    }
    for (const part of out) {
      this.parts.push(part);
      this.queued += part.byteLength;
      this.produced += part.byteLength;
    }
    this.finished = t.stopped;
  }

  /**
   * A compressed stream's chunk: not scanned at all once the stream's decoded total passes its bound, and the stream
   * ended after it if too much decoded gave the client too little (see DECODED_PER_SENT_BYTE). Ended as an oversized event is (the machine's error
   * event), billed for what was delivered, the upstream's fault.
   */
  private pushBounded(t: StreamDecoder['transcoder'], chunk: Uint8Array, bound: DecodedBound): Uint8Array[] {
    let why = bound.take(chunk.byteLength);
    let out: Uint8Array[] = [];
    if (!why) {
      out = t.push(chunk);
      if (t.stopped) {
        this.reader.cancel().catch(() => {});
        return out;
      }
      let sent = 0;
      for (const part of out) sent += part.byteLength;
      why = bound.scanned(sent);
      if (!why) {
        if (this.wholeAt < 0 && t.answerWhole) this.becameWhole();
        return out;
      }
    }
    this.halt(new StreamAbortedError(why, 'upstream_bad_response', true));
    return [...out, ...t.fail(this.stopped)];
  }

  private becameWhole(): void {
    // From now on the upstream has tailMs to close, whatever it still sends (pings would reset an idle limit).
    this.wholeAt = performance.now();
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = setTimeout(checkDeadlines, this.tailMs, this);
    }
  }

  end(clientSide: { code: string } | null): void | Promise<void> {
    if (this.ended) return;
    this.ended = true;
    clearTimeout(this.timer);
    this.signal?.removeEventListener('abort', this);
    const out = this.decoder.result();
    let errorCode = '';
    let upstreamFault = false;
    if (clientSide) errorCode = clientSide.code;
    else if (this.stopped) ({ code: errorCode, upstreamFault } = this.stopped);
    else if (!out.complete) { errorCode = 'upstream_stream_cut'; upstreamFault = true; }
    return this.onEnd(this.outcome(out, errorCode, upstreamFault));
  }

  private outcome(out: ReturnType<StreamDecoder['result']>, errorCode: string, upstreamFault: boolean): StreamEnd {
    return {
      usage: out.usage ?? out.estimatedUsage, reported: out.usage != null, estimatedUsage: out.estimatedUsage, codeExecutionCalls: out.codeExecutionCalls,
      peak: out.peak, errorCode, upstreamFault, reason: out.error ?? errorCode, ttftMs: this.ttft,
    };
  }

  /** The stream as the gateway's death would cut it now (the decoder's result() only reads). */
  private checkpoint(now: number): void {
    this.checkpointAt = now + this.checkpointMs;
    // A held stream that produced nothing since (an upstream silent for minutes) would write the same row again.
    if (this.produced === this.producedAtCheckpoint) return;
    this.producedAtCheckpoint = this.produced;
    this.onCheckpoint!(this.outcome(this.decoder.result(), 'gateway_crashed', false));
  }

  /** The client stream, from here on driven by the client's reads, the upstream's chunks, the timer and the signal. */
  open(): ReadableStream<Uint8Array> {
    this.quietSince = performance.now();
    if (this.checkpointMs) this.checkpointAt = this.quietSince + this.checkpointMs;
    this.timer = setTimeout(checkDeadlines, Math.max(1, Math.min(this.stallMs, this.idleMs, this.keepAliveMs, this.checkpointMs || NEVER, this.wholeAt < 0 ? this.startedAt + this.maxMs - this.quietSince : this.tailMs)), this);
    this.signal?.addEventListener('abort', this, { once: true });
    const body = new ReadableStream<Uint8Array>(this as unknown as Bun.UnderlyingSource<Uint8Array>, { highWaterMark: 0 });
    if (this.signal?.aborted) this.handleEvent();
    return body;
  }

  private notify(): void {
    const w = this.wake;
    if (!w || (this.draining && !this.closed)) return;
    // Still nothing to hand over: the pull keeps waiting, and the upstream is read for it.
    if (!this.queued && !this.finished && !this.closed) return this.pump();
    this.wake = null;
    this.deliver(this.ctrl!);
    w();
  }

  private closeWith(frame: string | null, tearDown: boolean): void {
    if (this.closed || !this.ctrl) return;
    this.closed = true;
    try {
      if (tearDown) this.ctrl.error(new Error('stream cut by the gateway'));
      else {
        if (this.held) this.ctrl.enqueue(this.held);
        this.held = null;
        if (frame) this.ctrl.enqueue(encoder.encode(frame));
        this.ctrl.close();
      }
    } catch { /* already closing */ }
    this.notify();
  }

  check(): void {
    if (this.drainLeft >= 0) return this.leave(); // the drain's time is up
    if (this.ended || this.closed) return;
    const now = performance.now();
    if (this.waitingClient && now - this.clientSince >= this.stallMs) {
      this.halt(new StreamAbortedError('The client stopped reading.', 'client_stalled', false));
      this.end({ code: 'client_stalled' });
      return this.closeWith(null, true);
    }
    const whole = this.wholeAt >= 0;
    if (whole && !this.tailCut && now - this.wholeAt >= this.tailMs) {
      // Nothing is missing but the close: close it ourselves; the next read resolves done, a normal end.
      this.tailCut = true;
      this.reader.cancel().catch(() => {});
    }
    if (!this.tailCut && this.waitingUpstream && now - this.upstreamSince >= this.idleMs) {
      this.halt(new StreamAbortedError(`The upstream sent nothing for ${this.idleMs} ms.`, 'upstream_stream_cut', true));
      return;
    }
    // Pings are activity, so an upstream that only pings never trips the idle limit: the whole life is bounded too.
    // Checked while we wait on the upstream (as the idle limit), so the read in progress ends at once.
    if (!whole && this.waitingUpstream && now - this.startedAt >= this.maxMs) {
      this.halt(new StreamAbortedError(`The upstream's answer took longer than ${this.maxMs} ms.`, 'upstream_stream_too_long', true));
      return;
    }
    // A ping only while the client has taken everything (its read is pending) and we wait on the upstream,
    // never after the message's end.
    if (this.waitingUpstream && !this.waitingClient && !whole && now - this.quietSince >= this.keepAliveMs && this.ctrl) {
      try { this.ctrl.enqueue(PING); } catch { return; }
      this.quietSince = now;
    }
    if (now >= this.checkpointAt) this.checkpoint(now);
    // Next check at the earliest deadline that could fall due (a state that starts later starts its own full period).
    const next = Math.min(
      this.waitingClient ? this.clientSince + this.stallMs - now : this.stallMs,
      this.waitingUpstream ? this.upstreamSince + this.idleMs - now : this.idleMs,
      whole && !this.tailCut ? this.wholeAt + this.tailMs - now : NEVER,
      this.waitingUpstream && !whole ? this.startedAt + this.maxMs - now : NEVER,
      this.quietSince + this.keepAliveMs - now,
      this.checkpointAt - now,
    );
    this.timer = setTimeout(checkDeadlines, Math.max(1, Math.min(NEVER, Math.ceil(next))), this);
  }

  /** Reads ahead of the client while fewer than bufferBytes wait for it (at least until one chunk does). */
  private pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    this.step();
  }

  private step(): void {
    if (this.finished || this.closed || this.draining || (this.queued !== 0 && this.queued >= this.bufferBytes)) return this.pumped();
    const wait = this.pending ? null : turnOver();
    if (wait) {
      wait.then(() => (this.closed || this.finished ? this.pumped() : this.readNext()));
      return;
    }
    this.readNext();
  }

  private readNext(): void {
    const read = this.pending ?? this.reader.read();
    this.pending = null;
    this.waitingUpstream = true;
    this.upstreamSince = performance.now();
    read.then(this.onRead, this.onReadError);
  }

  private read(r: ReadOutcome): void {
    this.waitingUpstream = false;
    if (this.drainLeft >= 0) return this.drained(r);
    if (this.closed || this.draining) return this.pumped();
    try {
      this.absorb(r);
    } catch (e) {
      this.pumped();
      throw e;
    }
    if (this.queued) this.notify();
    this.step();
  }

  private pumped(): void {
    this.pumping = false;
    this.notify();
  }

  /** Hands what is queued to the client, closes after the last of it, else reads ahead while the client takes it. */
  private deliver(c: Controller): void | Promise<void> {
    if (this.closed) return;
    let parts: Uint8Array[] = [];
    if (this.queued) {
      if (this.ttft === null) this.ttft = since(this.startedAt);
      parts = this.parts;
      this.parts = [];
      this.queued = 0;
    }
    if (this.held) {
      parts.unshift(this.held);
      this.held = null;
    }
    // Small pieces go out as one write, large ones as they are (no copy); the last is handled below.
    const writes = coalesceBytes(parts);
    const out = writes.pop() ?? null;
    for (const w of writes) c.enqueue(w);
    if (this.finished) {
      const settling = this.end(null);
      this.closed = true;
      if (!settling) {
        if (out) c.enqueue(out);
        c.close();
        return;
      }
      // Committing: the client gets the last byte (the end of the last event) once the charge is durable.
      return endAfter(c, out, settling);
    }
    if (out) {
      // The message is over but the upstream has not closed: its end waits with it (holdEnd).
      if (this.holdEnd && this.decoder.transcoder.messageEnded) this.held = holdLastByte(c, out);
      else c.enqueue(out);
      this.waitingClient = true;
      this.clientSince = this.quietSince = performance.now();
    }
    this.pump(); // read ahead while the client takes this
  }

  // --- the client stream's underlying source ---
  start(c: Controller): void {
    this.ctrl = c;
  }

  pull(c: Controller): Promise<void> | void {
    this.waitingClient = false;
    if (this.draining && !this.closed) return this.draining;
    if (this.queued || this.finished || this.closed) return this.deliver(c);
    return new Promise<void>((resolve) => {
      this.wake = resolve;
      this.pump();
    });
  }

  cancel(): void {
    if (this.drainLeft >= 0) return;
    if (this.drain()) {
      this.closed = true;
      return this.notify();
    }
    this.end({ code: 'client_closed' });
    this.closed = true;
    this.halt(new StreamAbortedError('The client closed the request.', 'client_closed', false));
    this.notify();
  }

  // --- the client gone after the upstream finished generating ---
  /**
   * Starts reading the upstream on without a client, when that can only bring the usage report: the upstream
   * finished generating (so reading costs no more output) and its usage has not come yet. Bounded by DRAIN_MS
   * (at most the idle limit) and DRAIN_BYTES, so a client cannot hold upstream connections open this way.
   * Returns false when there is nothing to wait for (the caller settles now); else the caller closes the client's side.
   */
  private drain(): boolean {
    const t = this.decoder.transcoder;
    if (this.ended || this.stopped || this.finished || !t.generated || t.answerWhole) return false;
    this.drainLeft = DRAIN_BYTES;
    this.parts = [];
    this.queued = 0;
    clearTimeout(this.timer);
    this.timer = setTimeout(checkDeadlines, Math.max(1, Math.min(DRAIN_MS, this.idleMs)), this);
    if (!this.waitingUpstream) this.drainNext(); // else the read in flight comes to drained()
    return true;
  }

  private drainNext(): void {
    const read = this.pending ?? this.reader.read();
    this.pending = null;
    this.waitingUpstream = true;
    read.then(this.onRead, this.onReadError);
  }

  /** One upstream read while draining: its output is dropped; the usage it carries is kept by the decoder. */
  private drained(r: ReadOutcome): void {
    this.pumping = false;
    if (this.ended) return;
    if (!('error' in r) && !r.done) this.drainLeft = Math.max(0, this.drainLeft - r.value.byteLength);
    this.absorb(r);
    this.parts = [];
    this.queued = 0;
    if (this.finished || this.decoder.transcoder.answerWhole || this.drainLeft === 0) return this.leave();
    this.drainNext();
  }

  /** Ends a drain (usage come, upstream ended, or a bound reached): the upstream is closed and the request settles once. */
  private leave(): void {
    if (this.ended) return;
    this.halt(new StreamAbortedError('The client closed the request.', 'client_closed', false));
    void this.end({ code: 'client_closed' });
  }

  // --- the abort listener (the client gone, or a revoked credential) ---
  handleEvent(): void {
    if (this.ended || this.drainLeft >= 0) return;
    // The client gone (not a reason of ours): a finished answer's usage may still be read.
    if (!(this.signal?.reason instanceof GatewayError) && this.drain()) return this.closeWith(null, false);
    const err = abortError(this.signal);
    this.halt(new StreamAbortedError(err.message, err.code, false));
    const settling = this.end({ code: err.code });
    // A reason of ours (a revoked key) is told to a client still reading; a gone client hears nothing.
    const frame = this.signal?.reason instanceof GatewayError ? errorFrame(err.message, err.type) : null;
    if (!settling) return this.closeWith(frame, false);
    this.draining = settling.catch(() => {}).then(() => this.closeWith(frame, false));
  }
}
