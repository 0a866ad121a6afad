/**
 * An OpenAI-Realtime-compatible upstream for tests and the benchmark: a Bun.serve WebSocket server
 * speaking the GA event shapes (as in OpenAI's Realtime API). It sends `session.created` on connect, answers
 * `response.create` with response.created → output_text deltas → response.done (with usage), echoes
 * every other frame back unchanged (text and binary), records what it received, and can refuse
 * connections, drop sockets, pause reading and push frames on demand.
 */
import type { ServerWebSocket } from 'bun';

export interface RealtimeUsage {
  total_tokens: number;
  input_tokens: number;
  output_tokens: number;
  input_token_details: {
    text_tokens: number; audio_tokens: number; image_tokens: number; cached_tokens: number;
    cached_tokens_details: { text_tokens: number; audio_tokens: number; image_tokens: number };
  };
  output_token_details: { text_tokens: number; audio_tokens: number };
}

/** The usage example of OpenAI's Realtime API reference (`response.done`). */
export const SAMPLE_USAGE: RealtimeUsage = {
  total_tokens: 512, input_tokens: 400, output_tokens: 112,
  input_token_details: { text_tokens: 80, audio_tokens: 320, image_tokens: 0, cached_tokens: 256, cached_tokens_details: { text_tokens: 64, audio_tokens: 192, image_tokens: 0 } },
  output_token_details: { text_tokens: 30, audio_tokens: 82 },
};

export interface ReceivedFrame {
  conn: number;
  data: string | Buffer;
  binary: boolean;
}

export interface UpstreamConnection {
  id: number;
  /** Request headers of the handshake (lower-case names). */
  headers: Record<string, string>;
  url: string;
  /** The client chose the beta protocol (`OpenAI-Beta: realtime=v1` or the `openai-beta.realtime-v1` subprotocol): beta event shapes. */
  beta: boolean;
  ws: ServerWebSocket<ConnData>;
  closed: { code: number; reason: string } | null;
}

interface ConnData { id: number; queue: Array<string | Uint8Array>; queued: number; blocked: boolean }

export interface RealtimeUpstreamDouble {
  /** HTTP origin to use as a channel's base_url (the adapter makes it ws://…/v1/realtime). */
  url: string;
  port: number;
  connections: UpstreamConnection[];
  received: ReceivedFrame[];
  /** Refuse the next handshakes with this HTTP status (0 = accept). */
  refuseWith: number;
  /** Usage reported for each response (by response number, from 1). */
  usageFor: (n: number) => RealtimeUsage;
  /** Text of each response, sent as this many deltas. */
  deltas: string[];
  /** Echo frames that are not response.create (default true). */
  echo: boolean;
  /** Read binary frames as events too, as a lenient server may (default false: binary frames are echoed). */
  binaryEvents: boolean;
  /** Answer this many next response.create events with an `error` event (naming the create's event_id, as OpenAI does) instead of a response. */
  refuseResponses: number;
  /**
   * Answer a text event whose type is not a client event of OpenAI's Realtime API with an `error` naming its
   * event_id (null when it has none), as OpenAI does, instead of echoing it; and a `response.cancel` with OpenAI's
   * `response_cancel_not_active` (the double never has a response running when it reads one) (default false).
   */
  rejectUnknown: boolean;
  /** Name the event an `error` is about in its `event_id`, as OpenAI does (default true); false: leave it out, as some compatible servers do. */
  echoEventIds: boolean;
  /**
   * Cut each response short: 'response.created' leaves response.create unanswered, 'response.done'
   * sends everything but the response.done (null = whole responses).
   */
  stopBefore: 'response.created' | 'response.done' | null;
  /** Answer each response.create this many ms late (0 = at once): its response.created can come after the gateway closed. */
  respondAfterMs: number;
  /** Wait this many ms before answering a handshake (e.g. a refusal with `refuseWith`), so client frames queue in the gateway meanwhile. */
  handshakeDelayMs: number;
  /** response.create events answered late that found their connection closed. */
  lateAnswers: number;
  /** The max_output_tokens a response.created announces when its response.create names none: the session's (default "inf"). */
  sessionMaxOutput: number | 'inf';
  /** Count of ws.send calls that returned -1 (the gateway stopped reading). */
  backpressured: number;
  /**
   * Sends frames to a connection (all by default). Like a real server it never lets Bun drop a
   * frame: past Bun's backpressure it queues them and sends on drain.
   */
  send(data: string | Uint8Array, conn?: number): void;
  /** Bytes not yet taken by the kernel for a connection (its own queue + Bun's). */
  unsent(conn: number): number;
  /** Closes every connection without a close frame (TCP drop). */
  drop(): void;
  /** Closes every connection with a close frame. */
  closeAll(code: number, reason: string): void;
  /** Waits until `pred` holds (polling), or throws after `ms`. */
  until(pred: () => boolean, ms?: number): Promise<void>;
  stop(): Promise<void>;
}

function isResponseCreate(text: string): boolean {
  try { return JSON.parse(text)?.type === 'response.create'; } catch { return false; }
}

/** OpenAI's Realtime client event types (GA). */
const CLIENT_EVENTS = new Set([
  'session.update', 'input_audio_buffer.append', 'input_audio_buffer.commit', 'input_audio_buffer.clear', 'conversation.item.create',
  'conversation.item.retrieve', 'conversation.item.truncate', 'conversation.item.delete', 'response.create', 'response.cancel', 'output_audio_buffer.clear',
]);

let eventSeq = 0;
const evId = () => `event_${++eventSeq}`;

export function startRealtimeUpstream(): RealtimeUpstreamDouble {
  let connSeq = 0;
  let responseSeq = 0;
  const self: RealtimeUpstreamDouble = {
    url: '', port: 0, connections: [], received: [], refuseWith: 0, echo: true, binaryEvents: false, backpressured: 0, refuseResponses: 0, rejectUnknown: false, echoEventIds: true, stopBefore: null, sessionMaxOutput: 'inf',
    respondAfterMs: 0, handshakeDelayMs: 0, lateAnswers: 0,
    usageFor: () => SAMPLE_USAGE,
    deltas: ['Hello', ' from', ' the double'],
    send(data, conn) {
      for (const c of self.connections) if ((conn === undefined || c.id === conn) && !c.closed) push(c.ws, data);
    },
    unsent(conn) {
      const c = self.connections.find((x) => x.id === conn)!;
      return c.ws.data.queued + c.ws.getBufferedAmount();
    },
    drop() { for (const c of self.connections) if (!c.closed) c.ws.terminate(); },
    closeAll(code, reason) { for (const c of self.connections) if (!c.closed) c.ws.close(code, reason); },
    async until(pred, ms = 3000) {
      const end = Date.now() + ms;
      while (!pred()) {
        if (Date.now() > end) throw new Error('realtime double: condition not reached in time');
        await Bun.sleep(2);
      }
    },
    async stop() { await server.stop(true); },
  };

  const size = (d: string | Uint8Array) => (typeof d === 'string' ? Buffer.byteLength(d) : d.byteLength);
  const push = (ws: ServerWebSocket<ConnData>, data: string | Uint8Array) => {
    const d = ws.data;
    if (d.blocked) {
      d.queue.push(data);
      d.queued += size(data);
    } else if (ws.send(data) === -1) {
      // Bun holds this one; anything more waits for drain (past its limit Bun would drop frames).
      self.backpressured++;
      d.blocked = true;
    }
  };
  const flush = (ws: ServerWebSocket<ConnData>) => {
    const d = ws.data;
    d.blocked = false;
    while (d.queue.length && !d.blocked) {
      const next = d.queue.shift()!;
      d.queued -= size(next);
      if (ws.send(next) === -1) {
        self.backpressured++;
        d.blocked = true;
      }
    }
  };
  const out = (ws: ServerWebSocket<ConnData>, ev: Record<string, unknown>) => {
    if (!self.echoEventIds && ev.type === 'error') {
      const { event_id: _, ...error } = ev.error as Record<string, unknown>;
      ev = { ...ev, error };
    }
    push(ws, JSON.stringify({ event_id: evId(), ...ev }));
  };

  const respond = (ws: ServerWebSocket<ConnData>, create: any) => {
    if (self.refuseResponses > 0) {
      self.refuseResponses--;
      const about = typeof create?.event_id === 'string' ? create.event_id : null;
      return out(ws, { type: 'error', error: { type: 'invalid_request_error', code: 'conversation_already_has_active_response', message: 'Conversation already has an active response', param: null, event_id: about } });
    }
    if (self.stopBefore === 'response.created') return;
    const n = ++responseSeq;
    const id = `resp_${n}`;
    const itemId = `item_${n}`;
    // Like OpenAI, the response states the limit it was created with (the session's, "inf" here, when the create sets none).
    const max = create?.response?.max_output_tokens ?? create?.response?.max_response_output_tokens ?? self.sessionMaxOutput;
    const base = { id, object: 'realtime.response', output: [], conversation_id: 'conv_1', output_modalities: ['text'], max_output_tokens: max };
    out(ws, { type: 'response.created', response: { ...base, status: 'in_progress', status_details: null, usage: null } });
    out(ws, { type: 'response.output_item.added', response_id: id, output_index: 0, item: { id: itemId, type: 'message', role: 'assistant', status: 'in_progress', content: [] } });
    for (const d of self.deltas) out(ws, { type: 'response.output_text.delta', response_id: id, item_id: itemId, output_index: 0, content_index: 0, delta: d });
    out(ws, { type: 'response.output_text.done', response_id: id, item_id: itemId, output_index: 0, content_index: 0, text: self.deltas.join('') });
    if (self.stopBefore === 'response.done') return;
    out(ws, { type: 'response.done', response: { ...base, status: 'completed', status_details: null, usage: self.usageFor(n) } });
  };

  const server = Bun.serve<ConnData>({
    port: 0,
    hostname: '127.0.0.1',
    async fetch(req, srv) {
      if (self.handshakeDelayMs) await Bun.sleep(self.handshakeDelayMs);
      if (self.refuseWith) return Response.json({ error: { message: 'refused by test', type: 'invalid_request_error', code: 'refused' } }, { status: self.refuseWith });
      const url = new URL(req.url);
      if (url.pathname !== '/v1/realtime') return new Response('not found', { status: 404 });
      const id = ++connSeq;
      const headers: Record<string, string> = {};
      req.headers.forEach((v, k) => { headers[k] = v; });
      // open() runs inside upgrade(), so the record must exist first.
      const beta = /realtime=v1/.test(headers['openai-beta'] ?? '') || (headers['sec-websocket-protocol'] ?? '').split(',').some((p) => p.trim() === 'openai-beta.realtime-v1');
      const conn: UpstreamConnection = { id, headers, url: req.url, beta, ws: null as any, closed: null };
      self.connections.push(conn);
      if (srv.upgrade(req, { data: { id, queue: [], queued: 0, blocked: false } })) return undefined;
      self.connections.pop();
      return new Response('expected a websocket', { status: 400 });
    },
    websocket: {
      // Like a real server, compression is accepted when the client offers it (the gateway must not).
      perMessageDeflate: true,
      open(ws) {
        const c = self.connections.find((x) => x.id === ws.data.id)!;
        c.ws = ws;
        const model = new URL(c.url).searchParams.get('model');
        // The beta protocol's session has no `type` and flat audio formats; GA nests them under `audio`.
        if (c.beta) return out(ws, { type: 'session.created', session: { object: 'realtime.session', id: `sess_${ws.data.id}`, model, modalities: ['text', 'audio'], voice: 'alloy', input_audio_format: 'pcm16', output_audio_format: 'pcm16' } });
        out(ws, { type: 'session.created', session: { type: 'realtime', object: 'realtime.session', id: `sess_${ws.data.id}`, model, output_modalities: ['audio'], audio: { input: { format: { type: 'audio/pcm', rate: 24000 } }, output: { format: { type: 'audio/pcm', rate: 24000 }, voice: 'alloy' } } } });
      },
      message(ws, data) {
        const binary = typeof data !== 'string';
        self.received.push({ conn: ws.data.id, data, binary });
        // Like a real server, the event type is whatever JSON.parse makes of it (escapes included).
        const text = !binary ? data : self.binaryEvents ? Buffer.from(data).toString('utf8') : null;
        if (text !== null && (text.includes('"response.create"') || text.includes('\\u')) && isResponseCreate(text)) {
          if (!self.respondAfterMs) return respond(ws, JSON.parse(text));
          const c = self.connections.find((x) => x.id === ws.data.id)!;
          setTimeout(() => { if (c.closed) self.lateAnswers++; respond(ws, JSON.parse(text)); }, self.respondAfterMs);
          return;
        }
        if (text !== null && self.rejectUnknown) {
          let ev: any = null;
          try { ev = JSON.parse(text); } catch { /* not JSON: refused below like an unknown type */ }
          const about = typeof ev?.event_id === 'string' ? ev.event_id : null;
          if (!CLIENT_EVENTS.has(ev?.type)) {
            return out(ws, { type: 'error', error: { type: 'invalid_request_error', code: 'invalid_value', message: `Invalid value: '${String(ev?.type)}'`, param: 'type', event_id: about } });
          }
          if (ev.type === 'response.cancel') {
            return out(ws, { type: 'error', error: { type: 'invalid_request_error', code: 'response_cancel_not_active', message: 'Cancellation failed: no active response found', param: null, event_id: about } });
          }
        }
        if (self.echo) push(ws, data);
      },
      drain(ws) {
        flush(ws);
      },
      close(ws, code, reason) {
        const c = self.connections.find((x) => x.id === ws.data.id);
        if (c) c.closed = { code, reason };
      },
    },
  });
  self.port = server.port!;
  self.url = `http://127.0.0.1:${server.port}`;
  return self;
}

/** A test client: collects every frame and the close, with awaitable helpers. */
export class RealtimeTestClient {
  readonly ws: WebSocket;
  readonly frames: Array<string | Buffer> = [];
  opened: Promise<void>;
  closed: Promise<{ code: number; reason: string }>;
  close: { code: number; reason: string } | null = null;

  constructor(url: string, opts: { headers?: Record<string, string>; protocols?: string[] } = {}) {
    this.ws = new WebSocket(url, { headers: opts.headers, protocols: opts.protocols } as any);
    this.ws.binaryType = 'nodebuffer';
    this.opened = new Promise((resolve, reject) => {
      this.ws.onopen = () => resolve();
      this.ws.onerror = (e: any) => reject(new Error(e?.message ?? 'websocket error'));
    });
    this.opened.catch(() => {});
    this.ws.onmessage = (e) => { this.frames.push(e.data as string | Buffer); };
    this.closed = new Promise((resolve) => {
      this.ws.onclose = (e) => { this.close = { code: e.code, reason: e.reason }; resolve(this.close); };
    });
  }

  /** Parsed text frames (JSON events). */
  events(): any[] {
    return this.frames.filter((f): f is string => typeof f === 'string').map((f) => JSON.parse(f));
  }

  /** Waits for an event of `type` (the n-th, from 1) and returns it. */
  async waitFor(type: string, n = 1, ms = 3000): Promise<any> {
    const end = Date.now() + ms;
    for (;;) {
      const hits = this.events().filter((e) => e.type === type);
      if (hits.length >= n) return hits[n - 1];
      if (Date.now() > end) throw new Error(`no ${type} #${n} within ${ms} ms; got ${this.events().map((e) => e.type).join(',')}`);
      await Bun.sleep(2);
    }
  }

  async waitFrames(n: number, ms = 5000): Promise<void> {
    const end = Date.now() + ms;
    while (this.frames.length < n) {
      if (Date.now() > end) throw new Error(`only ${this.frames.length}/${n} frames within ${ms} ms`);
      await Bun.sleep(2);
    }
  }

  /** Resolves with the close, or throws after `ms`. */
  async waitClose(ms = 3000): Promise<{ code: number; reason: string }> {
    return Promise.race([this.closed, Bun.sleep(ms).then(() => { throw new Error(`socket not closed within ${ms} ms`); })]);
  }
}
