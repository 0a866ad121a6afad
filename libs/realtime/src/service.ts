/**
 * The realtime relay service: admits a WebSocket request (every check that can fail before the
 * upgrade), then runs the admitted session (relay + metering) and records it when it ends.
 * Framework-free: the route hands it the request and installs the returned socket handlers.
 */
import type { ServerWebSocket } from 'bun';
import { GatewayError, errorText, errors, nowSeconds, randomToken, stdLogger, type Logger } from '@gw/core';
import { scrubberFor } from '@gw/providers';
import type { RealtimeConfig } from './config';
import { isWebSocketRequest, readBeta, readCredentials, upstreamBeta } from './handshake';
import { SessionMeter } from './meter';
import { storedText } from './stored-id';
import type { ChannelSource, KeyLookup, KeyPolicy, PriceSource, QuotaPort, RealtimeChannel, RealtimeKey, SessionRecord, SessionSink, UpstreamResolver } from './ports';
import { INTERNAL_FAILURE, RelaySession, type SessionFailure, type UpstreamTarget } from './session';
import { reservationFor, type RealtimePrice } from './usage';

export interface RealtimeDeps<K extends RealtimeKey, C extends RealtimeChannel, R> {
  config: RealtimeConfig;
  keys: KeyLookup<K>;
  policy: KeyPolicy<K>;
  channels: ChannelSource<C>;
  prices: PriceSource;
  quota: QuotaPort<K, R>;
  upstream: UpstreamResolver<C>;
  sessions: SessionSink;
  /** Billing policy (@gw/billing BillingConfig): refuse unpriced models; smallest reservation. */
  billing: { requirePrice: boolean; minReserve: number; defaultContextTokens?: number };
  /** Channel try order (@gw/relay orderCandidates: priority, then weighted random). */
  order?: (channels: C[]) => C[];
  /** Where unexpected errors go (never to the client). */
  log?: Logger;
  /**
   * Live sessions registered by key and owner (@gw/relay InflightRegistry): an abort whose reason
   * carries a code and message (the key was revoked, the owner disabled) ends the session with 1008.
   */
  inflight?: { open(keyId: number, userId: number): { signal: AbortSignal; release(): void } };
  /**
   * The gateway-wide cap on relayed requests (@gw/relay UpstreamSlots): a session holds a slot from admission
   * to its end, like a stream; `acquire` throws the 503 when none is free.
   */
  slots?: { acquire(userId?: number): () => void };
  /** Sessions per key counted by every node (PostgreSQL mode); absent: counted in this process. */
  sessionLeases?: { acquire(keyId: number, max: number): Promise<(() => void) | null> };
}

/** An admitted request: what the route needs to upgrade it. */
export interface Admission {
  sessionId: string;
  /** Subprotocol to answer with (never the key-bearing one); null = none. */
  protocol: string | null;
  /** Bun websocket handlers for this session (Elysia's server dispatches to `ws.data.*`). */
  handlers: SocketHandlers;
  /** Gives the session slot back when the upgrade did not happen. */
  abandon(): void;
  /** Who the session belongs to and its routing group (for the caller's rate limits). */
  subject: { keyId: number; userId: number; group: string; model: string };
}

export interface SocketHandlers {
  open(ws: ServerWebSocket<any>): void;
  message(ws: ServerWebSocket<any>, data: string | Buffer): void;
  drain(ws: ServerWebSocket<any>): void;
  close(ws: ServerWebSocket<any>, code: number, reason: string): void;
}

const ENABLED = 1;
/** BILLING_DEFAULT_CONTEXT_TOKENS' default, for callers that pass no billing config of their own. */
const DEFAULT_CONTEXT_TOKENS = 200_000;

/** A revocation (key revoked, owner disabled) ends a session like any policy close: error event, then 1008. */
function revokedFailure(reason: unknown): SessionFailure {
  const r = reason as { code?: unknown; message?: unknown } | undefined;
  const code = typeof r?.code === 'string' ? r.code : 'api_key_revoked';
  const message = typeof r?.message === 'string' ? r.message : 'The API key was disabled or deleted';
  return { closeCode: 1008, reason: code.replace(/_/g, ' '), type: 'authentication_error', code, message };
}
// cacheWrite too: settle prices every kind of token it is given.
const FREE: RealtimePrice = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, audioInput: 0, audioOutput: 0 } as RealtimePrice;

export class RealtimeService<K extends RealtimeKey, C extends RealtimeChannel, R> {
  private readonly live = new Set<RelaySession>();
  /** Session records being written. */
  private readonly recording = new Set<Promise<void>>();
  private readonly perKey = new Map<number, number>();
  private closing = false;

  constructor(private readonly d: RealtimeDeps<K, C, R>) {}

  private get contextDefault(): number {
    return this.d.billing.defaultContextTokens ?? DEFAULT_CONTEXT_TOKENS;
  }

  /** The largest client WebSocket message (REALTIME_MAX_FRAME_BYTES): the server's maxPayloadLength. */
  get maxFrameBytes(): number {
    return this.d.config.maxFrameBytes;
  }

  /** Bun's idleTimeout for the realtime WebSocket (RealtimeConfig.idleTimeoutSeconds). */
  get idleTimeoutSeconds(): number {
    return this.d.config.idleTimeoutSeconds;
  }

  /** Live sessions (admitted and not yet ended). */
  get liveCount(): number {
    return [...this.perKey.values()].reduce((a, b) => a + b, 0);
  }

  /**
   * Runs every pre-upgrade check, in the /v1/messages order: key (401) → WebSocket request (400) →
   * key policy (401 status/owner, 403 model/IP allow-list, 429 rate limit) → session limit (429) →
   * unknown model (404) → unpriced (403) → quota (402) → no healthy channel (503).
   * Throws a GatewayError; on success the caller must upgrade or call `abandon()`. A promise when the
   * quota answers later (its trial reservation is awaited; the session counts toward its key's cap meanwhile).
   */
  admit(request: Request, ip: string): Admission | Promise<Admission> {
    const creds = readCredentials(request.headers);
    if (!creds.key) throw errors.unauthorized('missing_api_key', 'Send the API key as Authorization: Bearer <key> or the openai-insecure-api-key.<key> subprotocol');
    if (creds.key.startsWith('gwm_')) throw errors.unauthorized('wrong_credential_kind', 'Management access tokens are not accepted on /v1/; use a relay API key (sk-…)');
    const key = this.d.keys.lookup(creds.key);
    if (!key) throw errors.unauthorized('invalid_api_key', 'Invalid API key');
    if (!isWebSocketRequest(request)) throw new GatewayError(400, 'websocket_required', 'This endpoint needs a WebSocket upgrade (GET with Upgrade: websocket)', { param: 'upgrade' });
    if (this.closing) throw new GatewayError(503, 'shutting_down', 'The server is shutting down');

    const model = new URL(request.url).searchParams.get('model')?.trim() || this.d.config.defaultModel;
    const { group, ratio = 1000 } = this.d.policy.authorize(key, model, ip);
    const max = this.d.config.maxSessionsPerKey;
    const shared = max > 0 ? this.d.sessionLeases : undefined;
    if (shared) {
      // Every node's sessions count: a lease in the shared store, held until the session ends.
      return shared.acquire(key.id, max).then((release) => {
        if (!release) throw tooManySessions(max);
        try {
          const a = this.admitWithin(request, ip, creds.key!, creds.answerProtocol, key, model, group, ratio, release);
          return a instanceof Promise ? a.catch((e) => { release(); throw e; }) : a;
        } catch (e) {
          release();
          throw e;
        }
      });
    }
    if (max > 0 && (this.perKey.get(key.id) ?? 0) >= max) throw tooManySessions(max);
    return this.admitWithin(request, ip, creds.key, creds.answerProtocol, key, model, group, ratio, null);
  }

  /** admit() after the session limit: model, price, gateway slot, quota, channels. `lease`: the shared slot, given back with the session. */
  private admitWithin(request: Request, ip: string, plainKey: string, protocol: string | null, key: K, model: string, group: string, ratio: number,
    lease: (() => void) | null): Admission | Promise<Admission> {
    const serves = (c: C) => c.models.includes(model) && c.groups.includes(group) && this.d.upstream.supports(c);
    if (!this.d.channels.all().some(serves)) {
      throw new GatewayError(404, 'model_not_found', `Model ${model} is not served over realtime by this gateway`, { param: 'model', type: 'invalid_request_error' });
    }
    const price = this.d.prices.get(model) ?? (this.d.billing.requirePrice ? undefined : FREE);
    if (!price) throw errors.forbidden('model_not_priced', `Model ${model} has no price configured; an administrator must set one before it can be used`, 'model');
    // Before the trial reservation: at capacity, nothing is held and no upstream is dialled.
    const gatewaySlot = this.d.slots?.acquire(key.userId);
    // Counted from here, so admissions awaiting their trial reservation cannot together pass the key's cap.
    this.perKey.set(key.id, (this.perKey.get(key.id) ?? 0) + 1);
    let released = false;
    const releaseSlot = () => {
      if (released) return;
      released = true;
      gatewaySlot?.();
      lease?.();
      const n = (this.perKey.get(key.id) ?? 1) - 1;
      if (n <= 0) this.perKey.delete(key.id);
      else this.perKey.set(key.id, n);
    };
    const rest = () => {
      try {
        const candidates = this.d.channels.candidates(model, group).filter(serves);
        const beta = upstreamBeta(readBeta(request.headers));
        const targets = (this.d.order ?? ((c: C[]) => c))(candidates).flatMap((c) => this.target(c, model, beta));
        if (targets.length === 0) throw new GatewayError(503, 'no_healthy_channel', `No healthy channel is available for model ${model}; try again later`);
        return this.session({ key, plainKey, model, ip, price, group, ratio, targets, releaseSlot, protocol });
      } catch (e) {
        releaseSlot();
        throw e;
      }
    };
    let trial: void | Promise<void>;
    try {
      trial = this.checkQuota(key, price, ratio);
    } catch (e) {
      releaseSlot();
      throw e;
    }
    if (!trial) return rest();
    return trial.then(rest, (e) => {
      releaseSlot();
      throw e;
    });
  }

  /** An admitted session: its meter, its relay, and the socket handlers the route installs. */
  private session(a: { key: K; plainKey: string; model: string; ip: string; price: RealtimePrice; group: string; ratio: number;
    targets: UpstreamTarget[]; releaseSlot: () => void; protocol: string | null }): Admission {
    const { key, model, ip, price, group, ratio, targets, releaseSlot } = a;
    const sessionId = `rt_${randomToken(20)}`;
    const meter = new SessionMeter<K, R>({
      sessionId, plainKey: a.plainKey, key, model, ip, defaultOutputTokens: this.d.config.reserveTokens,
      defaultContextTokens: this.contextDefault, minReserve: this.d.billing.minReserve,
      price, group, ratio, keys: this.d.keys, policy: this.d.policy, prices: this.d.prices, quota: this.d.quota, log: this.d.log,
    });
    const startedAt = nowSeconds();
    let stopHandle: { signal: AbortSignal; release(): void } | undefined;
    const session: RelaySession = new RelaySession({
      targets,
      connectTimeoutMs: this.d.config.connectTimeoutMs,
      bufferBytes: this.d.config.bufferBytes,
      maxSessionMs: this.d.config.maxSessionSeconds * 1000,
      closeGraceMs: this.d.config.closeGraceMs,
      clientStallMs: this.d.config.clientStallMs,
      limits: this.d.config,
      observer: meter,
      onError: (e) => (this.d.log ?? stdLogger).error('realtime.session_error', { session: sessionId }, e),
      onEnd: (end) => {
        this.live.delete(session);
        stopHandle?.release();
        releaseSlot();
        this.safely('end', () => meter.end(end.cause, end.forwarded));
        const endedAt = nowSeconds();
        // After the session's last settlements commit (durable mode), so the record's cost is theirs.
        this.record(meter.idle().then(() => ({
          sessionId, userId: key.userId, apiKeyId: key.id, channelId: end.channelId, model,
          startedAt, endedAt, durationMs: end.endedAtMs - end.startedAtMs,
          framesIn: end.framesIn, framesOut: end.framesOut, bytesIn: end.bytesIn, bytesOut: end.bytesOut,
          // The client's (or upstream's) own words: PostgreSQL refuses a NUL in them, and the record was lost.
          responses: meter.responses, cost: meter.cost, closeCode: end.closeCode, closeReason: storedText(end.closeReason, 123),
        })));
      },
    });
    const handlers: SocketHandlers = {
      open: (ws) => {
        this.live.add(session);
        this.safely('open', () => session.open(ws), () => session.fail(INTERNAL_FAILURE));
        stopHandle = this.d.inflight?.open(key.id, key.userId);
        const stop = () => { if (!session.isEnded) session.fail(revokedFailure(stopHandle!.signal.reason)); };
        if (stopHandle?.signal.aborted) stop();
        else stopHandle?.signal.addEventListener('abort', stop, { once: true });
        // A revocation or narrowing that landed before the registration above (while admission awaited the shared
        // store) aborted nothing: the key is read again now.
        const refused = session.isEnded ? undefined : meter.keyRefusal();
        if (refused) session.fail(refused);
      },
      message: (ws, data) => this.safely('message', () => session.message(ws, data), () => session.fail(INTERNAL_FAILURE)),
      drain: (ws) => this.safely('drain', () => session.drain(ws)),
      close: (ws, code, reason) => this.safely('close', () => session.close(ws, code, reason)),
    };
    return { sessionId, protocol: a.protocol, handlers, abandon: releaseSlot, subject: { keyId: key.id, userId: key.userId, group, model } };
  }

  /** Closes every live session with 1001 (server going away) and records them; further admissions get 503. */
  /** Resolves once the ended sessions are recorded (shutdown awaits it before the database closes). */
  closeAll(reason = 'server shutting down'): Promise<void> {
    this.closing = true;
    for (const s of [...this.live]) {
      s.fail({ closeCode: 1001, reason, type: 'api_error', code: 'server_shutdown', message: 'The gateway is shutting down' });
    }
    return Promise.all([...this.recording]).then(() => {});
  }

  /** Writes a session record in the background; a failed write is logged (the session is over either way). */
  private record(row: Promise<SessionRecord>): void {
    const p: Promise<void> = row.then((r) => this.d.sessions.insert(r))
      .catch((e) => (this.d.log ?? stdLogger).error('realtime.failed', { what: 'record' }, e))
      .finally(() => this.recording.delete(p));
    this.recording.add(p);
  }

  /** The user and key must be able to pay for one response now; nothing stays held. */
  private checkQuota(key: K, price: RealtimePrice, ratio: number): void | Promise<void> {
    const c = price.contextWindow;
    const ctx = typeof c === 'number' && Number.isSafeInteger(c) && c > 0 ? c : this.contextDefault;
    const amount = Math.max(this.d.billing.minReserve, reservationFor(ctx, this.d.config.reserveTokens, price, ratio));
    return this.d.quota.affords({ userId: key.userId, apiKey: key, amount, ref: `rt_admit_${randomToken(12)}` });
  }

  /** The upstream of a channel; none when its address cannot be built (a misconfigured base URL is skipped). */
  private target(c: C, model: string, beta: ReturnType<typeof upstreamBeta>): UpstreamTarget[] {
    const upstreamModel = c.modelMapping[model] || model;
    try {
      // The client's beta choice first: a header the operator set on the channel wins.
      const headers = { ...beta.headers, ...this.d.upstream.headers(c, upstreamModel) };
      const scrubber = scrubberFor({ apiKey: c.apiKey, extraHeaders: c.headers, keys: c.keys?.map((k) => k.apiKey), baseUrl: c.baseUrl });
      // A channel billing the upstream model does so only when that model has a price (else the requested one's applies).
      const billedModel = c.billingModel === 'upstream' && upstreamModel !== model && this.d.prices.get(upstreamModel) ? upstreamModel : model;
      return [{
        channelId: c.id, upstreamModel, billedModel, url: this.d.upstream.url(c, upstreamModel), headers, protocols: beta.protocols,
        scrub: (t) => scrubber.scrub(t),
      }];
    } catch (e) {
      (this.d.log ?? stdLogger).warn('realtime.channel_skipped', { channel: c.id, cause: errorText(e), msg: 'cannot build its upstream address' });
      return [];
    }
  }

  private safely(what: string, fn: () => void, onError?: () => void): void {
    try {
      fn();
    } catch (e) {
      (this.d.log ?? stdLogger).error('realtime.failed', { what }, e);
      onError?.();
    }
  }
}

function tooManySessions(max: number): GatewayError {
  return new GatewayError(429, 'too_many_sessions', `This API key already has ${max} realtime sessions open`, { headers: { 'retry-after': '1' } });
}
