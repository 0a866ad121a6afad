/**
 * One relayed realtime session: a client socket accepted by Bun.serve and an upstream socket opened
 * with Bun's WebSocket client. Frames pass both ways as received (strings stay text frames, buffers
 * stay binary), in order, with backpressure, and both sockets close together.
 */
import type { ServerWebSocket } from 'bun';
import { binaryAsText, binaryIsEvent } from './binary-text';
import { errorEvent, plainAppend, scrubbedErrorEvent } from './events';
import { ReadBudget, frameCost } from './read-budget';

type Frame = string | Buffer;

/** Why the gateway ends a session itself: sent to the client as an `error` event, then a close. */
export interface SessionFailure {
  closeCode: number;
  reason: string;
  type: string;
  code: string;
  message: string;
}

/** One upstream to try, in order. */
export interface UpstreamTarget {
  channelId: number;
  upstreamModel: string;
  /** The model whose price bills the session's responses (the channel's billing_model); absent = the requested one. */
  billedModel?: string;
  url: string;
  headers: Record<string, string>;
  /** Subprotocols offered to the upstream (the client's beta choice); absent = none. */
  protocols?: string[];
  /** Removes the channel's secrets from upstream text (its error events and close reasons) before the client sees it. */
  scrub: (text: string) => string;
}

/** A client frame the gateway declines (e.g. a response the balance cannot cover): answered with an error event, session kept. */
export interface FrameRefusal {
  refuse: true;
  type: string;
  code: string;
  message: string;
}

/** A client frame forwarded in a changed form (e.g. without a field the session fixes), in the frame's kind (text or binary). */
export interface FrameRewrite {
  forward: string;
}

export type ClientVerdict = SessionFailure | FrameRefusal | FrameRewrite | undefined;

/**
 * Looks at frames: upstream text frames are never changed; a client frame is forwarded as received unless
 * its verdict refuses or rewrites it. A returned failure ends the session.
 */
export interface FrameObserver {
  /**
   * A client frame as text (a binary one decoded as a lenient upstream would, binary-text.ts, since it may read it as an event too),
   * before it is forwarded; on failure or refusal it is not forwarded. A promised verdict holds this frame
   * and every later client frame (in order) until it settles.
   */
  client(text: string): ClientVerdict | Promise<ClientVerdict>;
  /**
   * An upstream text frame, before it is relayed; on failure it is still relayed, then the session ends.
   * A promised verdict holds this frame and every later upstream frame (in order) until it settles.
   */
  upstream(text: string): SessionFailure | undefined | Promise<SessionFailure | undefined>;
  /** The upstream for the session is chosen (a retry may change it before). */
  connected(target: UpstreamTarget): void;
  /**
   * Ids of the responses the upstream started and has not reported (response.done) yet: when the client leaves, the
   * relay cancels them and reads on until they are reported (RelayOptions.closeGraceMs).
   */
  unfinished?(): string[];
  /** Given at open: how the observer ends the session from outside a frame (e.g. a settlement whose commit failed). */
  attach?(fail: (f: SessionFailure) => void): void;
  /**
   * The event_id the client gave an event the observer forwarded under another one (`{ id }`, null for none), so an
   * upstream `error` naming it is relayed naming the client's; undefined: an id the observer did not give.
   */
  clientEventId?(id: string): { id: unknown } | undefined;
}

export interface SessionEnd {
  channelId: number | null;
  startedAtMs: number;
  endedAtMs: number;
  framesIn: number;
  framesOut: number;
  bytesIn: number;
  bytesOut: number;
  closeCode: number;
  closeReason: string;
  /** Why it ended, as an error code: client_closed, upstream_closed, upstream_disconnected, or the gateway's failure code. */
  cause: string;
  /**
   * Every client frame the observer let through was sent to an upstream. False when none was: the upstream never
   * opened (frames wait for it in order, and a retry happens only while nothing was sent), so they were dropped.
   */
  forwarded: boolean;
}

export interface RelayOptions {
  targets: UpstreamTarget[];
  connectTimeoutMs: number;
  /** Backpressure threshold in bytes (see RealtimeConfig.bufferBytes). */
  bufferBytes: number;
  /** 0 = no limit. */
  maxSessionMs: number;
  /**
   * How long the upstream is still read after the client left with responses running (their report is what the
   * upstream bills); 0 or absent = closed at once.
   */
  closeGraceMs?: number;
  /** A client that takes nothing of its queue for this long is treated as gone (RealtimeConfig.clientStallMs); 0 or absent = never. */
  clientStallMs?: number;
  observer: FrameObserver;
  /** Called exactly once, after both sockets were told to close. */
  onEnd(end: SessionEnd): void;
  /** What the gateway reads of one session (RealtimeConfig); absent = no bound beyond Bun's. */
  limits?: ReadLimits;
  /** An observer threw reading an upstream frame, or a promised client verdict failed (the session ends with 1011). */
  onError?(e: unknown): void;
}

/** See RealtimeConfig: maxFrameBytes (the client's own bound, for the burst), maxEventBytes, maxUpstreamFrameBytes, readBytesPerSecond. */
export interface ReadLimits {
  maxFrameBytes: number;
  maxEventBytes: number;
  maxUpstreamFrameBytes: number;
  readBytesPerSecond: number;
}

/** A client event too large to read: not forwarded, and the session ends with 1009 (message too big). */
export const eventTooLarge = (size: number, max: number): SessionFailure => ({
  closeCode: 1009, reason: 'event too large', type: 'invalid_request_error', code: 'event_too_large',
  message: `Event of ${size} bytes is larger than the ${max} bytes the gateway reads (REALTIME_MAX_EVENT_BYTES; audio appends may be larger); it was not forwarded`,
});

/** The failure used when the gateway itself broke (an observer threw). */
export const INTERNAL_FAILURE: SessionFailure = { closeCode: 1011, reason: 'internal error', type: 'api_error', code: 'internal_error', message: 'Internal gateway error' };

/**
 * An upstream frame: as received, as text (a binary one decoded as a client's SDK reads it, binary-text.ts; null: not
 * an event), and (once delivered) as the client gets it (its error text scrubbed); `read` once the observer saw it
 * (a frame held by the read budget is not, until its wait ends).
 */
interface UpFrame { raw: Frame; size: number; text: string | null; out?: Frame; read?: boolean }

const byteLength = (f: Frame) => (typeof f === 'string' ? Buffer.byteLength(f) : f.byteLength);
const POLL_MS = 5;
/** A wait that does not keep the process alive (a held frame of a session that ended meanwhile is dropped). */
const delay = (ms: number) => new Promise<void>((r) => setTimeout(r, ms).unref());

/** Close codes an endpoint may send (RFC 6455 §7.4); anything else is replaced. */
const sendable = (code: number) => (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999);
/** Close reasons are limited to 123 bytes of UTF-8. */
const clip = (reason: string) => (Buffer.byteLength(reason) <= 123 ? reason : Buffer.from(reason).subarray(0, 120).toString('utf8').replace(/\uFFFD$/, ''));

export class RelaySession {
  private client: ServerWebSocket<unknown> | null = null;
  private up: WebSocket | null = null;
  private upOpen = false;
  private attempt = 0;
  /** Client frames received while the upstream connects, sent in order once it opens. */
  private pending: Frame[] = [];
  private pendingBytes = 0;
  /** A client frame's verdict is awaited: it and the client frames after it wait here, in order. */
  private awaiting = false;
  private blocked: Frame[] = [];
  private blockedBytes = 0;
  /** An upstream frame whose verdict is awaited, and the upstream frames behind it (raw, and as the client gets it). */
  private upDeciding: UpFrame | null = null;
  private upBehind: UpFrame[] = [];
  /** The upstream closed while frames were held: handled once they are through. */
  private upClosedLate: { code: number; reason: string } | null = null;
  /** Upstream frames Bun could not take yet (after a send returned -1), flushed on drain. */
  private outQueue: Frame[] = [];
  private clientBackpressured = false;
  /** The upstream (or the connect buffer) is full: the client is not read until it drains (pauseClient). */
  private clientPaused = false;
  /** The client socket is paused: while either of the above holds (syncClientReading). */
  private clientReadStopped = false;
  private pollTimer: ReturnType<typeof setInterval> | null = null;
  private connectTimer: ReturnType<typeof setTimeout> | null = null;
  private lifeTimer: ReturnType<typeof setTimeout> | null = null;
  /** Anything relayed either way: after that, an upstream failure is not retried elsewhere. */
  private relayedAny = false;
  private ended = false;
  /** The client left while responses ran: its close, kept until they are reported or the grace ends (closeGraceMs). */
  private leaving: { code: number; reason: string; upCode: number } | null = null;
  private graceTimer: ReturnType<typeof setInterval> | null = null;
  /** Watches a backpressured client for progress (clientStallMs). */
  private stallTimer: ReturnType<typeof setInterval> | null = null;
  /** Stall-watch ticks since the backpressured client last took something (a drain, or its queue going down). */
  private stallIdleTicks = 0;
  private channelId: number | null = null;
  private readonly startedAtMs = Date.now();
  private framesIn = 0;
  private framesOut = 0;
  private bytesIn = 0;
  private bytesOut = 0;
  /** What the gateway may read per second of each side (limits.readBytesPerSecond). */
  private readonly clientBudget: ReadBudget | null;
  private readonly upBudget: ReadBudget | null;

  constructor(private readonly opts: RelayOptions) {
    const l = opts.limits;
    this.clientBudget = l ? new ReadBudget(l.readBytesPerSecond, Math.max(l.maxFrameBytes, l.readBytesPerSecond)) : null;
    this.upBudget = l ? new ReadBudget(l.readBytesPerSecond, Math.max(l.maxUpstreamFrameBytes, l.readBytesPerSecond)) : null;
  }

  private readonly eventIdOf = (id: string) => this.opts.observer.clientEventId?.(id);

  get isEnded(): boolean {
    return this.ended;
  }

  /** Bun `open`: start connecting upstream; client frames are buffered meanwhile. */
  open(ws: ServerWebSocket<unknown>): void {
    this.client = ws;
    this.opts.observer.attach?.((f) => this.fail(f));
    if (this.opts.maxSessionMs > 0) {
      this.lifeTimer = setTimeout(() => this.fail({
        closeCode: 1008, reason: 'session time limit reached', type: 'invalid_request_error',
        code: 'session_time_limit', message: `Session reached the maximum length of ${Math.round(this.opts.maxSessionMs / 1000)} seconds`,
      }), this.opts.maxSessionMs);
    }
    this.connect();
  }

  /** Bun `message`: forward (or buffer) one client frame. */
  message(_ws: ServerWebSocket<unknown>, data: Frame): void {
    if (this.ended) return;
    const size = byteLength(data);
    this.framesIn++;
    this.bytesIn += size;
    if (this.awaiting) {
      this.blocked.push(data);
      // By frame cost, not bytes: 4 MiB of 2-byte frames were two million strings held here before the client paused.
      this.blockedBytes += frameCost(size);
      if (this.blockedBytes > this.opts.bufferBytes) this.pauseClient();
      return;
    }
    this.accept(data, size);
  }

  /**
   * Asks the observer about a client frame, then forwards it (now, or once a promised verdict allows). A frame read
   * as text is bounded first: one the gateway would parse, by maxEventBytes (refused unread, session closed 1009);
   * every one, by the session's read budget (past it, the frame and those behind it wait their turn, unread).
   */
  private accept(data: Frame, size: number): void {
    const text = typeof data === 'string' ? data : binaryAsText(data);
    const limits = this.opts.limits;
    if (text !== null && limits && size > limits.maxEventBytes && !plainAppend(text)) return this.fail(eventTooLarge(size, limits.maxEventBytes));
    // A binary frame that is no event is not parsed, but it is read and sent like any: the budget counts it too (it
    // did not, so a flood of 1-byte binary frames went through unbounded).
    const wait = this.clientBudget?.take(size) ?? 0;
    if (wait > 0) return this.hold(data, delay(wait).then(() => (this.ended || text === null ? undefined : this.opts.observer.client(text))));
    if (text === null) return this.forward(data);
    const verdict = this.opts.observer.client(text);
    if (!(verdict instanceof Promise)) return this.apply(data, verdict);
    this.hold(data, verdict);
  }

  /** A client frame whose verdict comes later: it and every client frame after it wait for it, in order. */
  private hold(data: Frame, verdict: Promise<ClientVerdict>): void {
    this.awaiting = true;
    verdict.then((v) => this.apply(data, v)).catch((e) => this.broke(e)).finally(() => this.release());
  }

  /** The observer (or our own code) threw outside Bun's handlers: the session ends with 1011. */
  private broke(e: unknown): void {
    this.opts.onError?.(e);
    this.fail(INTERNAL_FAILURE);
  }

  private apply(data: Frame, verdict: ClientVerdict): void {
    if (this.ended) return;
    if (verdict && 'refuse' in verdict) return this.toClient(errorEvent(verdict.type, verdict.code, verdict.message));
    // A rewritten frame keeps its kind: a binary event a lenient upstream reads stays binary.
    if (verdict && 'forward' in verdict) return this.forward(typeof data === 'string' ? verdict.forward : Buffer.from(verdict.forward));
    if (verdict) return this.fail(verdict);
    this.forward(data);
  }

  /** A promised verdict settled: the frames held behind it go on, in order, until the next one waits. */
  private release(): void {
    this.awaiting = false;
    try {
      while (!this.awaiting && !this.ended && this.blocked.length) {
        const f = this.blocked.shift()!;
        const size = byteLength(f);
        this.blockedBytes -= frameCost(size);
        this.accept(f, size);
      }
    } catch (e) {
      this.broke(e);
    }
  }

  private forward(data: Frame): void {
    if (this.ended) return;
    const size = byteLength(data);
    if (!this.upOpen) {
      this.pending.push(data);
      this.pendingBytes += frameCost(size);
      if (this.pendingBytes > this.opts.bufferBytes) this.pauseClient();
      return;
    }
    this.relayedAny = true;
    this.up!.send(data);
    if (this.up!.bufferedAmount > this.opts.bufferBytes) this.pauseClient();
  }

  /** Bun `drain`: the client socket took its queue; send what waited and read the upstream again. */
  drain(ws: ServerWebSocket<unknown>): void {
    if (this.ended || this.leaving) return;
    this.stallIdleTicks = 0;
    while (this.outQueue.length) {
      const r = ws.send(this.outQueue[0]!);
      this.outQueue.shift();
      if (r === -1) return;
      if (r === 0) return; // closed: the close handler ends the session
    }
    this.clientBackpressured = false;
    this.syncClientReading();
    if (this.up?.isPaused && !this.upDeciding) this.up.resume();
  }

  /** Bun `close`: the client went away; close the upstream with a matching code. */
  close(_ws: ServerWebSocket<unknown>, code: number, reason: string): void {
    if (this.ended || this.leaving) return;
    const upCode = code === 1005 ? 1000 : sendable(code) ? code : 1001;
    this.leaving = { code, reason: reason || (code === 1006 ? 'client connection lost' : ''), upCode };
    const running = this.upOpen ? this.opts.observer.unfinished?.() ?? [] : [];
    const grace = this.opts.closeGraceMs ?? 0;
    if (!running.length || grace <= 0) return this.left();
    // Responses still running were generated (or are being) upstream, which bills them whole: a client that stopped
    // reading (the upstream then unread behind it) and left was billed only on what the gateway had read. They are
    // cancelled, and the upstream read (nothing relayed) until it reports them, for at most the grace.
    const cancelled = new Set<string>();
    const cancel = (ids: string[]) => {
      for (const id of ids) {
        if (cancelled.has(id) || this.up?.readyState !== WebSocket.OPEN) continue;
        cancelled.add(id);
        this.up.send(JSON.stringify({ type: 'response.cancel', response_id: id }));
      }
    };
    cancel(running);
    this.outQueue = [];
    this.clientBackpressured = false;
    if (!this.upDeciding) this.up!.resume();
    const until = Date.now() + grace;
    this.graceTimer = setInterval(() => {
      // One the upstream starts meanwhile (its turn detection on audio already sent) is nobody's: cancelled too.
      const left = this.opts.observer.unfinished?.() ?? [];
      cancel(left);
      if ((!this.upDeciding && !this.upBehind.length && !left.length) || Date.now() >= until) this.left();
    }, POLL_MS);
  }

  /** The client is gone and nothing it started is still awaited upstream: the session ends as the client closed it. */
  private left(): void {
    const l = this.leaving!;
    this.finish({ clientCode: l.code, reason: l.reason, upstreamCode: l.upCode, clientClosed: true, cause: 'client_closed' });
  }

  /** Ends the session from the gateway side (e.g. server shutdown, quota): error event, then close. */
  fail(f: SessionFailure): void {
    if (this.ended) return;
    this.finish({ clientClosed: !!this.leaving, clientCode: f.closeCode, reason: f.reason, upstreamCode: 1000, event: errorEvent(f.type, f.code, f.message), cause: f.code });
  }

  private connect(): void {
    const target = this.opts.targets[this.attempt]!;
    let opened = false;
    let up: WebSocket;
    try {
      // No permessage-deflate offer: Bun inflates a compressed frame whole before any size check, so an upstream could
      // send a few kB that became a 128 MiB frame in the gateway's memory (+423 MiB, 443 ms, measured).
      up = new WebSocket(target.url, { headers: target.headers, protocols: target.protocols, perMessageDeflate: false } as any);
    } catch {
      return this.retryOrFail('invalid upstream address'); // a misconfigured base URL: try the next channel
    }
    up.binaryType = 'nodebuffer';
    this.up = up;
    this.connectTimer = setTimeout(() => { if (!opened) up.terminate(); }, this.opts.connectTimeoutMs);
    up.onopen = () => {
      opened = true;
      this.clearConnectTimer();
      if (this.ended) return up.close(1000, 'client gone');
      this.upOpen = true;
      this.channelId = target.channelId;
      this.opts.observer.connected(target);
      if (this.pending.length) this.relayedAny = true;
      for (const f of this.pending) up.send(f);
      this.pending = [];
      this.pendingBytes = 0;
      if (up.bufferedAmount > this.opts.bufferBytes) this.pauseClient();
    };
    up.onmessage = (ev) => { if (this.up === up) this.fromUpstream(ev.data as Frame); };
    up.onclose = (ev) => {
      this.clearConnectTimer();
      if (this.up !== up || this.ended) return;
      if (!opened || !this.relayedAny) return this.retryOrFail(opened ? `closed ${ev.code}` : 'connect failed');
      // Frames still held for a verdict reach the client before the close.
      if (this.upDeciding) this.upClosedLate = { code: ev.code, reason: ev.reason };
      else this.upstreamClosed(ev.code, ev.reason);
    };
  }

  private retryOrFail(why: string): void {
    this.upOpen = false;
    this.up = null;
    if (++this.attempt < this.opts.targets.length) return this.connect();
    this.fail({
      closeCode: 1013, reason: 'no upstream available', type: 'overloaded_error', code: 'upstream_unavailable',
      message: `Could not connect to any upstream for this model (${why})`,
    });
  }

  private fromUpstream(data: Frame): void {
    if (this.ended) return;
    this.framesOut++;
    const size = byteLength(data);
    this.bytesOut += size;
    this.relayedAny = true;
    // A binary frame is an event to the official SDK too (`ws` hands it a Buffer it reads with toString()): before, one
    // was relayed unread, an `error` in it unscrubbed and a response announced and reported in them never billed.
    // Sized before a binary one is decoded: an oversized frame is refused without converting it first.
    const max = this.opts.limits?.maxUpstreamFrameBytes;
    if (max !== undefined && size > max && (typeof data === 'string' || binaryIsEvent(data))) return this.upstreamTooLarge(size, max);
    const text = typeof data === 'string' ? data : binaryAsText(data);
    const f: UpFrame = { raw: data, size, text };
    if (this.upDeciding) this.upBehind.push(f);
    else this.observeUpstream(f);
  }

  /**
   * The frame as the client gets it: an upstream event's error text scrubbed of the channel's secrets (parsed, so only
   * once read), a binary frame staying binary.
   */
  private outOf(f: UpFrame): Frame {
    if (f.out === undefined) {
      const out = f.text === null ? null : scrubbedErrorEvent(f.text, this.opts.targets[this.attempt]!.scrub, this.eventIdOf);
      f.out = out === null || out === f.text ? f.raw : typeof f.raw === 'string' ? out : Buffer.from(out);
    }
    return f.out;
  }

  /**
   * An upstream text frame over maxUpstreamFrameBytes: not read, so not relayed (what it reports could not be metered);
   * the session ends, the upstream told 1009, the client an error event and 1011. A response it left open is billed
   * as cut (meter.end).
   */
  private upstreamTooLarge(size: number, max: number): void {
    this.finish({
      clientCode: 1011, reason: 'upstream frame too large', upstreamCode: 1009, cause: 'upstream_frame_too_large',
      event: errorEvent('api_error', 'upstream_frame_too_large',
        `The upstream sent a frame of ${size} bytes, over the ${max} bytes the gateway reads (REALTIME_MAX_UPSTREAM_FRAME_BYTES); the session was ended`),
    });
  }

  /** Relays an upstream frame once the observer has read it (now, or once a promised verdict settles). */
  private observeUpstream(f: UpFrame): void {
    let verdict: SessionFailure | undefined | Promise<SessionFailure | undefined>;
    try {
      const text = f.text;
      // Past the session's read budget the frame (and the upstream behind it) waits, unread, like one awaiting a commit.
      // Every frame, binary ones that are no event too (not parsed, but read and sent all the same).
      const wait = this.upBudget?.take(f.size) ?? 0;
      if (wait > 0) {
        verdict = delay(wait).then(() => {
          if (this.ended) return undefined; // finish() had the observer read it
          f.read = true;
          return text !== null ? this.opts.observer.upstream(text) : undefined;
        });
      } else {
        f.read = true;
        verdict = text !== null ? this.opts.observer.upstream(text) : undefined;
      }
    } catch (e) {
      // E.g. the usage could not be written: stop rather than keep serving unbilled responses.
      this.opts.onError?.(e);
      verdict = INTERNAL_FAILURE;
    }
    if (verdict instanceof Promise) {
      this.upDeciding = f;
      // Held frames are few (a commit takes milliseconds), but the upstream is not read meanwhile.
      this.up?.pause();
      verdict.catch((e): SessionFailure => { this.opts.onError?.(e); return INTERNAL_FAILURE; }).then((v) => this.upstreamDecided(v));
      return;
    }
    this.toClient(this.outOf(f));
    if (verdict) this.fail(verdict);
  }

  private upstreamDecided(verdict: SessionFailure | undefined): void {
    const f = this.upDeciding;
    this.upDeciding = null;
    if (this.ended || !f) return; // finish() delivered the held frames
    try {
      this.toClient(this.outOf(f));
      if (verdict) return this.fail(verdict);
      while (!this.upDeciding && !this.ended && this.upBehind.length) this.observeUpstream(this.upBehind.shift()!);
      if (this.upDeciding || this.ended) return;
      const closed = this.upClosedLate;
      if (closed) return this.upstreamClosed(closed.code, closed.reason);
      if (!this.clientBackpressured) this.up?.resume();
    } catch (e) {
      this.broke(e);
    }
  }

  private toClient(data: Frame): void {
    if (this.leaving) return;
    if (this.clientBackpressured) {
      this.outQueue.push(data);
      return;
    }
    const r = this.client!.send(data);
    if (r === -1) {
      // Bun queued it; stop reading the upstream so the queue stays bounded, resume on drain. The client too: the
      // gateway answers some of its events itself (refusals), and a client that never reads would otherwise have
      // them queued here without bound (24 MB of refused events queued 189 MB).
      this.clientBackpressured = true;
      this.up?.pause();
      this.syncClientReading();
      this.watchStall();
    }
  }

  /**
   * While frames wait for the client, it must take some of them now and then: one that stopped reading (a half-closed
   * socket behind a proxy, a hostile client) would otherwise hold its session, slot and upstream until Bun's idle
   * timeout, its responses running. Progress is the bytes Bun still queues for it going down, or its queue emptied.
   */
  private watchStall(): void {
    const limit = this.opts.clientStallMs ?? 0;
    const ws = this.client;
    if (limit <= 0 || this.stallTimer || !ws) return;
    let queued = ws.getBufferedAmount();
    this.stallIdleTicks = 0;
    const every = Math.min(1000, Math.max(POLL_MS, limit / 4));
    // Ticks without progress, not the wall clock: an event loop held for a second (GC, a loaded machine) must not
    // count against a client whose drain is waiting behind it; a tick that runs late counts once.
    const ticks = Math.ceil(limit / every);
    this.stallTimer = setInterval(() => {
      if (this.ended || this.leaving || !this.clientBackpressured) return this.unwatchStall();
      const now = ws.getBufferedAmount();
      this.stallIdleTicks = now < queued ? 0 : this.stallIdleTicks + 1;
      queued = now;
      if (this.stallIdleTicks < ticks) return;
      this.unwatchStall();
      this.close(ws, 1006, 'client stopped reading');
      // Its socket is let go unflushed (a close frame would only queue behind what it does not read).
      ws.terminate();
    }, every);
  }

  private unwatchStall(): void {
    if (this.stallTimer) clearInterval(this.stallTimer);
    this.stallTimer = null;
  }

  private upstreamClosed(code: number, rawReason: string): void {
    if (this.leaving) {
      const l = this.leaving;
      return this.finish({ clientCode: l.code, reason: l.reason, upstreamClosed: true, clientClosed: true, cause: 'client_closed' });
    }
    const reason = rawReason && this.opts.targets[this.attempt]!.scrub(rawReason);
    if (code === 1000 || code === 1005) {
      return this.finish({ clientCode: 1000, reason: reason || 'upstream closed', upstreamClosed: true, cause: 'upstream_closed' });
    }
    const lost = code === 1006;
    this.finish({
      clientCode: lost ? 1011 : sendable(code) ? code : 1011,
      reason: lost ? 'upstream connection lost' : reason || `upstream closed (${code})`,
      upstreamClosed: true,
      cause: lost ? 'upstream_disconnected' : 'upstream_closed',
      event: errorEvent('api_error', lost ? 'upstream_disconnected' : 'upstream_closed',
        lost ? 'The upstream connection was lost' : `The upstream closed the session (${code}${reason ? `: ${reason}` : ''})`),
    });
  }

  /** Stops reading the client until the upstream (or the connect buffer) drains to half the threshold. */
  private pauseClient(): void {
    if (this.clientPaused || !this.client) return;
    this.clientPaused = true;
    this.syncClientReading();
    // Bun's client WebSocket has no drain event: poll its bufferedAmount.
    this.pollTimer = setInterval(() => {
      const queued = (this.upOpen ? this.up!.bufferedAmount : this.pendingBytes) + this.blockedBytes;
      if (this.ended || queued <= this.opts.bufferBytes / 2) this.resumeClient();
    }, POLL_MS);
  }

  private resumeClient(): void {
    if (this.pollTimer) clearInterval(this.pollTimer);
    this.pollTimer = null;
    if (!this.clientPaused) return;
    this.clientPaused = false;
    this.syncClientReading();
  }

  /** Reads the client only while neither the upstream nor the client itself is backed up; never resumed once ended. */
  private syncClientReading(): void {
    const stop = this.clientPaused || this.clientBackpressured;
    if (this.ended || !this.client || stop === this.clientReadStopped) return;
    this.clientReadStopped = stop;
    if (stop) this.client.pause();
    else this.client.resume();
  }

  private clearConnectTimer(): void {
    if (this.connectTimer) clearTimeout(this.connectTimer);
    this.connectTimer = null;
  }

  /** An upstream frame read as the session ends: its verdict no longer matters, only what it bills. */
  private observeLate(text: string): void {
    try {
      const v = this.opts.observer.upstream(text);
      if (v instanceof Promise) v.catch((e) => this.opts.onError?.(e));
    } catch (e) {
      this.opts.onError?.(e);
    }
  }

  private finish(o: { clientCode: number; reason: string; cause: string; upstreamCode?: number; event?: string; clientClosed?: boolean; upstreamClosed?: boolean }): void {
    if (this.ended) return;
    this.ended = true;
    this.clearConnectTimer();
    if (this.lifeTimer) clearTimeout(this.lifeTimer);
    if (this.graceTimer) clearInterval(this.graceTimer);
    this.unwatchStall();
    this.resumeClient();
    const reason = clip(o.reason);
    const client = this.client;
    if (client && !o.clientClosed && client.readyState === 1) {
      // Frames already accepted from the upstream are delivered before the error and the close.
      for (const f of this.outQueue) client.send(f);
      for (const f of this.upDeciding ? [this.upDeciding, ...this.upBehind] : []) client.send(this.outOf(f));
      if (o.event) client.send(o.event);
      client.close(sendable(o.clientCode) ? o.clientCode : 1011, reason);
    }
    // Frames held behind a pending verdict were never read: the observer still sees them, delivered or not
    // (the usage a response.done reports, a completed transcription, are work the upstream did).
    // So is the frame the read budget holds (a response.done, say): the session ending during its wait must not bill
    // its response as cut.
    const unread = [...(this.upDeciding && !this.upDeciding.read ? [this.upDeciding] : []), ...this.upBehind];
    for (const f of unread) if (f.text !== null) this.observeLate(f.text);
    this.outQueue = [];
    this.pending = [];
    this.blocked = [];
    this.blockedBytes = 0;
    this.upDeciding = null;
    this.upBehind = [];
    const up = this.up;
    if (up && !o.upstreamClosed) {
      if (up.readyState === WebSocket.OPEN) up.close(o.upstreamCode ?? 1000, reason);
      else if (up.readyState === WebSocket.CONNECTING) up.terminate();
    }
    this.opts.onEnd({
      channelId: this.channelId, startedAtMs: this.startedAtMs, endedAtMs: Date.now(),
      framesIn: this.framesIn, framesOut: this.framesOut, bytesIn: this.bytesIn, bytesOut: this.bytesOut,
      closeCode: o.clientCode, closeReason: reason, cause: o.cause, forwarded: this.upOpen,
    });
  }
}
